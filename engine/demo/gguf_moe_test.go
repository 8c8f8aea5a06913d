package demo

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/gguf"
	"fusion/engine/tensor"
)

// ggufMoEScript reads a GGUF file with the gguf package (llama.cpp's
// gguf-py) and prints as JSON: the architecture and its expert_* keys, the
// GGUF name llama.cpp's converter gives each Hugging Face name of argv[2]
// (mlx-lm's stacked switch_mlp experts are the converter's merged
// mlp.experts), whether each tensor is one qwen3moe declares, and every
// tensor's type, shape (outermost first) and the sha256 of its values
// dequantized by gguf.quants as float32.
const ggufMoEScript = `
import hashlib, json, sys
import numpy as np
import gguf
from gguf.constants import MODEL_ARCH, MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES

r = gguf.GGUFReader(sys.argv[1])
arch = r.fields["general.architecture"].contents()
blocks = r.fields[arch + ".block_count"].contents()
known = {a for a, n in MODEL_ARCH_NAMES.items() if n == arch}
declared = set()
for a in known:
    for t in MODEL_TENSORS[a]:
        for b in range(blocks):
            for suffix in (".weight", ".bias"):
                declared.add(TENSOR_NAMES[t].format(bid=b) + suffix)
names = {}
if known:
    tmap = gguf.TensorNameMap(next(iter(known)), blocks)
    for hf in json.loads(sys.argv[2]):
        conv = hf.replace(".switch_mlp.", ".experts.")
        if conv.endswith("sinks"):
            conv += ".weight"  # as GptOssModel.filter_tensors names them
        names[hf] = tmap.get_name(conv, try_suffixes=(".weight", ".bias"))
keys = {k: r.fields[k].contents() for k in r.fields if k.startswith(arch + ".expert")}
tensors = {}
for t in r.tensors:
    v = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4")
    tensors[t.name] = {"type": t.tensor_type.name, "shape": [int(d) for d in reversed(t.shape)],
                       "sha": hashlib.sha256(v.tobytes()).hexdigest(), "declared": t.name in declared}
print(json.dumps({"arch": arch, "keys": keys, "names": names, "tensors": tensors}))
`

// TestGGUFMoEPython: llama.cpp's gguf package reads a qwen3_moe demo
// written as GGUF: architecture qwen3moe with its expert_* keys, tensor
// names that llama.cpp's converter gives the same Hugging Face tensors and
// that qwen3moe declares, the router (ffn_gate_inp) in F32 and the stacked
// experts ffn_{gate,up,down}_exps [experts, out, in] in Q8_0, or Q4_K with
// ffn_down_exps in Q6_K (q4_k_m) — every tensor dequantized by gguf.quants
// equal bit for bit to ours. A gpt_oss demo likewise (architecture
// gpt-oss): its experts in MXFP4, their biases, the router's and the
// sinks (attn_sinks.weight) in F32, post_attention_norm.
func TestGGUFMoEPython(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		types map[string]string // GGUF name → type
		arch  string            // "" is qwen3_moe
	}{
		{"q4_k_m", map[string]string{
			"blk.0.ffn_gate_inp.weight": "F32", "blk.0.ffn_gate_exps.weight": "Q4_K", "blk.0.ffn_up_exps.weight": "Q4_K",
			"blk.1.ffn_down_exps.weight": "Q6_K", "blk.1.attn_v.weight": "Q6_K", "blk.1.attn_q.weight": "Q4_K",
		}, ""},
		{"q8_0", map[string]string{
			"blk.1.ffn_gate_inp.weight": "F32", "blk.1.ffn_gate_exps.weight": "Q8_0", "blk.0.ffn_down_exps.weight": "Q8_0",
		}, ""},
		{"f16", map[string]string{"blk.0.ffn_up_exps.weight": "F16", "blk.0.ffn_gate_inp.weight": "F32"}, ""},
		{"bf16", map[string]string{
			"blk.0.ffn_gate_exps.weight": "MXFP4", "blk.1.ffn_down_exps.weight": "MXFP4", "blk.0.ffn_up_exps.bias": "F32",
			"blk.1.ffn_gate_inp.weight": "F32", "blk.1.ffn_gate_inp.bias": "F32", "blk.0.attn_sinks.weight": "F32",
			"blk.0.post_attention_norm.weight": "F32", "blk.0.attn_output.bias": "F32", "blk.0.attn_q.weight": "BF16",
		}, "gpt_oss"},
	} {
		arch := cmp.Or(tc.arch, "qwen3_moe")
		t.Run(arch+"/"+tc.kind, func(t *testing.T) {
			o := Options{Arch: arch, Format: FormatGGUF, GGUFType: tc.kind, Hidden: 256, Heads: 4, KVHeads: 2,
				Intermediate: 256, Layers: 2, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 256, Seed: 21}
			if arch == "gpt_oss" { // MXFP4 needs rows of 32 only: smaller is quicker under -race
				o.Hidden, o.Heads, o.KVHeads, o.MoEIntermediate = 64, 2, 1, 64
			}
			out := filepath.Join(t.TempDir(), "moe")
			m, err := Create(out, o)
			if err != nil {
				t.Fatal(err)
			}
			hf := make([]string, len(m.Tensors))
			for i, s := range m.Tensors {
				hf[i] = s.Name
			}
			hfJSON, _ := json.Marshal(hf)
			raw := runPython(t, ggufMoEScript, GGUFPath(out), string(hfJSON))
			var py struct {
				Arch   string
				Keys   map[string]int
				Names  map[string]*string
				Tensor map[string]struct {
					Type     string
					Shape    []int64
					Sha      string
					Declared bool
				} `json:"tensors"`
			}
			if err := json.Unmarshal(raw, &py); err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
			ga := gguf.GGUFArch(arch)
			if py.Arch != ga {
				t.Errorf("general.architecture %q, want %s", py.Arch, ga)
			}
			wantKeys := map[string]int{ga + ".expert_count": 4, ga + ".expert_used_count": 2, ga + ".expert_feed_forward_length": o.MoEIntermediate}
			for k, v := range wantKeys {
				if py.Keys[k] != v {
					t.Errorf("%s = %d, want %d (keys %v)", k, py.Keys[k], v, py.Keys)
				}
			}

			f, err := gguf.Open(GGUFPath(out), gguf.LoadRead)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(py.Tensor) != len(m.Tensors) || len(f.Tensors) != len(m.Tensors) {
				t.Errorf("%d tensors read by gguf-py, %d by us, %d written", len(py.Tensor), len(f.Tensors), len(m.Tensors))
			}
			for _, src := range m.Tensors {
				name, _ := gguf.GGUFNameFor(arch, src.Name)
				if want := py.Names[src.Name]; want == nil || *want != name {
					t.Errorf("%s: written as %s, llama.cpp's converter names it %v", src.Name, name, want)
				}
				p, ok := py.Tensor[name]
				if !ok {
					t.Errorf("gguf-py does not see %s", name)
					continue
				}
				if !p.Declared {
					t.Errorf("%s is not a %s tensor in gguf.constants", name, ga)
				}
				ours, _ := f.Tensor(name)
				if !slices.Equal(p.Shape, ours.Shape) || !slices.Equal(ours.Shape, src.Shape) {
					t.Errorf("%s: shape %v in gguf-py, %v here, %v written", name, p.Shape, ours.Shape, src.Shape)
				}
				if p.Type != ours.DType.String() && !strings.EqualFold(p.Type, ours.DType.String()) {
					t.Errorf("%s: type %s in gguf-py, %v here", name, p.Type, ours.DType)
				}
				if want, ok := tc.types[name]; ok && p.Type != want {
					t.Errorf("%s: type %s, want %s", name, p.Type, want)
				}
				vals, err := gguf.ToFloat32(ours)
				if err != nil {
					t.Fatal(err)
				}
				if got := shaFloats(vals); got != p.Sha {
					t.Errorf("%s (%v): our dequantized values differ from gguf.quants'", name, ours.DType)
				}
			}
			if len(tc.types) > 0 && t.Failed() {
				return
			}
			// The checked types cover the mixture's K-quants.
			seen := map[tensor.DType]bool{}
			for _, ft := range f.Tensors {
				if strings.Contains(ft.Name, "_exps.") {
					seen[ft.DType] = true
				}
			}
			t.Logf("%s: %d tensors bit-exact vs gguf.quants; expert types %v", tc.kind, len(m.Tensors), seen)
		})
	}
}

// shaFloats is the sha256 of x as little-endian float32s.
func shaFloats(x []float32) string {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
