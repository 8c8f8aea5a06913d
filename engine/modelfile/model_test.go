package modelfile

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// f32Tensor makes an F32 tensor whose values are base+i/1000.
func f32Tensor(name string, base float32, shape ...int64) tensor.Tensor {
	n, _ := tensor.NumElements(shape)
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(base+float32(i)/1000))
	}
	return tensor.Tensor{Name: name, DType: tensor.F32, Shape: shape, Data: data}
}

// bf16Tensor converts float32 values to a BF16 tensor.
func bf16Tensor(name string, vals []float32, shape ...int64) tensor.Tensor {
	data := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(data[2*i:], tensor.F32ToBF16(v))
	}
	return tensor.Tensor{Name: name, DType: tensor.BF16, Shape: shape, Data: data}
}

func u32Tensor(name string, words []uint32, shape ...int64) tensor.Tensor {
	data := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(data[4*i:], w)
	}
	return tensor.Tensor{Name: name, DType: tensor.U32, Shape: shape, Data: data}
}

// quantTensors quantizes a [rows, cols] matrix into path.{weight,scales,biases}
// with BF16 scales and biases, returning the tensors and the bf16-rounded
// input it quantized.
func quantTensors(t testing.TB, path string, rows, cols, group, bits int) ([]tensor.Tensor, []float32) {
	t.Helper()
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = tensor.BF16ToF32(tensor.F32ToBF16(float32(math.Sin(float64(i)*0.37)) * 0.1))
	}
	packed, scales, biases, err := QuantizeAffine(w, rows, cols, group, bits)
	if err != nil {
		t.Fatal(err)
	}
	g := int64(cols / group)
	return []tensor.Tensor{
		u32Tensor(path+".weight", packed, int64(rows), int64(PackedCols(cols, bits))),
		bf16Tensor(path+".scales", scales, int64(rows), g),
		bf16Tensor(path+".biases", biases, int64(rows), g),
	}, w
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tinyDir writes a config (vocab 64, hidden 64) and the given weight files.
func tinyDir(t testing.TB, edits map[string]any, files map[string][]tensor.Tensor) string {
	t.Helper()
	dir := t.TempDir()
	e := map[string]any{"vocab_size": 64, "bos_token_id": 1, "eos_token_id": 2}
	for k, v := range edits {
		e[k] = v
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), cfgJSON(t, e), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, ts := range files {
		if err := safetensors.WriteFile(filepath.Join(dir, name), ts, map[string]string{"format": "mlx"}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOpenSingleFile(t *testing.T) {
	emb := f32Tensor("model.embed_tokens.weight", 0, 64, 64)
	norm := f32Tensor("model.norm.weight", 1, 64)
	dir := tinyDir(t, nil, map[string][]tensor.Tensor{SingleWeightsFile: {emb, norm}})
	writeJSON(t, filepath.Join(dir, GenerationConfigFile), map[string]any{"eos_token_id": []int{3, 2}, "temperature": 0.7})
	for _, mode := range []safetensors.LoadMode{safetensors.LoadRead, safetensors.LoadMmap} {
		m, err := Open(dir, Options{LoadMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if m.Weights.Len() != 2 || m.Weights.Bytes() != int64(len(emb.Data)+len(norm.Data)) || m.Weights.Mode() != mode {
			t.Errorf("%v: %d tensors, %d bytes, mode %v", mode, m.Weights.Len(), m.Weights.Bytes(), m.Weights.Mode())
		}
		if got := m.EOSTokenIDs(); !slices.Equal(got, []int{2, 3}) {
			t.Errorf("EOS = %v, want config's then generation_config's", got)
		}
		l, err := m.Linear("model.embed_tokens")
		if err != nil || l.Quantized || l.Out != 64 || l.In != 64 {
			t.Fatalf("embedding: %+v, %v", l, err)
		}
		vals, err := l.Dequantize()
		if err != nil || vals[5] != float32(5)/1000 {
			t.Errorf("embedding values: %v, %v", vals[:6], err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Open(dir, Options{ConfigOnly: true})
	if err != nil || m.Weights != nil || *m.Generation.Temperature != 0.7 {
		t.Fatalf("ConfigOnly: %+v, %v", m, err)
	}
	if _, err := m.Linear("model.embed_tokens"); err == nil {
		t.Error("Linear without weights succeeded")
	}
}

func TestOpenChecksWeightsAgainstConfig(t *testing.T) {
	tests := []struct {
		name  string
		edits map[string]any
		ts    []tensor.Tensor
		want  error
		msg   string
	}{
		{"embedding rows differ from vocab", nil, []tensor.Tensor{f32Tensor("model.embed_tokens.weight", 0, 32, 64)}, ErrBadLinear, "vocab_size 64"},
		{"no embedding", nil, []tensor.Tensor{f32Tensor("model.norm.weight", 0, 64)}, ErrMissingTensor, "model.embed_tokens.weight"},
		{"untied without lm_head", map[string]any{"tie_word_embeddings": false}, []tensor.Tensor{f32Tensor("model.embed_tokens.weight", 0, 64, 64)}, ErrMissingTensor, "lm_head.weight"},
	}
	for _, tc := range tests {
		dir := tinyDir(t, tc.edits, map[string][]tensor.Tensor{SingleWeightsFile: tc.ts})
		_, err := Open(dir, Options{})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error = %v, want %v mentioning %q", tc.name, err, tc.want, tc.msg)
		}
	}
}

func shardedDir(t *testing.T, index any) string {
	t.Helper()
	dir := tinyDir(t, nil, map[string][]tensor.Tensor{
		"model-00001-of-00002.safetensors": {f32Tensor("model.embed_tokens.weight", 0, 64, 64), f32Tensor("model.norm.weight", 1, 64)},
		"model-00002-of-00002.safetensors": {f32Tensor("model.layers.0.mlp.down_proj.weight", 2, 64, 128), f32Tensor("extra.unlisted", 0, 2)},
	})
	writeJSON(t, filepath.Join(dir, IndexFile), index)
	return dir
}

func TestShardedWeights(t *testing.T) {
	good := map[string]any{
		"metadata": map[string]any{"total_size": 64*64*4 + 64*4 + 64*128*4},
		"weight_map": map[string]string{
			"model.embed_tokens.weight":           "model-00001-of-00002.safetensors",
			"model.norm.weight":                   "model-00001-of-00002.safetensors",
			"model.layers.0.mlp.down_proj.weight": "model-00002-of-00002.safetensors",
		},
	}
	dir := shardedDir(t, good)
	for _, mode := range []safetensors.LoadMode{safetensors.LoadRead, safetensors.LoadMmap} {
		w, err := OpenWeights(dir, mode)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight"}
		if !reflect.DeepEqual(w.Names(), want) || w.Bytes() != 64*64*4+64*4+64*128*4 || len(w.Files()) != 2 {
			t.Errorf("%v: names %v, bytes %d, files %v", mode, w.Names(), w.Bytes(), w.Files())
		}
		if w.Has("extra.unlisted") {
			t.Error("a tensor the index does not list is exposed")
		}
		d, ok := w.Tensor("model.layers.0.mlp.down_proj.weight")
		if !ok || math.Float32frombits(binary.LittleEndian.Uint32(d.Data[4:])) != 2.001 {
			t.Errorf("down_proj: %v", ok)
		}
		w.Close()
	}

	bad := func(edit func(m map[string]string)) map[string]any {
		wm := map[string]string{}
		for k, v := range good["weight_map"].(map[string]string) {
			wm[k] = v
		}
		edit(wm)
		return map[string]any{"weight_map": wm}
	}
	tests := []struct {
		name  string
		index any
		want  error
		msg   string
	}{
		{"missing shard", bad(func(m map[string]string) { m["model.norm.weight"] = "model-00003-of-00003.safetensors" }), ErrMissingShard, "model-00003-of-00003.safetensors"},
		{"missing tensor", bad(func(m map[string]string) { m["lm_head.weight"] = "model-00002-of-00002.safetensors" }), ErrMissingTensor, `"lm_head.weight" is listed in model-00002-of-00002.safetensors`},
		{"tensor in the other shard", bad(func(m map[string]string) { m["model.norm.weight"] = "model-00002-of-00002.safetensors" }), ErrMissingTensor, "model.norm.weight"},
		{"path escape", bad(func(m map[string]string) { m["model.norm.weight"] = "../model-00001-of-00002.safetensors" }), ErrInvalidIndex, "not a file name"},
		{"empty weight map", map[string]any{"weight_map": map[string]string{}}, ErrInvalidIndex, "empty weight_map"},
		{"malformed", []int{1}, ErrInvalidIndex, ""},
	}
	for _, tc := range tests {
		dir := shardedDir(t, tc.index)
		_, err := OpenWeights(dir, safetensors.LoadMmap)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error = %v, want %v mentioning %q", tc.name, err, tc.want, tc.msg)
		}
	}
}

func TestUnindexedWeights(t *testing.T) {
	dir := tinyDir(t, nil, map[string][]tensor.Tensor{
		"model-a.safetensors": {f32Tensor("a", 0, 2)},
		"model-b.safetensors": {f32Tensor("b", 0, 3)},
	})
	w, err := OpenWeights(dir, safetensors.LoadRead)
	if err != nil || w.Len() != 2 || w.Bytes() != 20 {
		t.Fatalf("glob: %v", err)
	}
	w.Close()
	dup := tinyDir(t, nil, map[string][]tensor.Tensor{
		"model-a.safetensors": {f32Tensor("a", 0, 2)},
		"model-b.safetensors": {f32Tensor("a", 0, 2)},
	})
	if _, err := OpenWeights(dup, safetensors.LoadRead); !errors.Is(err, ErrDuplicateTensor) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := OpenWeights(t.TempDir(), safetensors.LoadRead); !errors.Is(err, ErrNoWeights) {
		t.Errorf("empty dir: %v", err)
	}
	corrupt := t.TempDir()
	os.WriteFile(filepath.Join(corrupt, SingleWeightsFile), []byte("not a safetensors file"), 0o644)
	if _, err := OpenWeights(corrupt, safetensors.LoadRead); !errors.Is(err, safetensors.ErrHeaderTooLarge) {
		t.Errorf("corrupt file: %v", err)
	}
}

func TestQuantizedLinear(t *testing.T) {
	down, downW := quantTensors(t, "model.layers.0.mlp.down_proj", 64, 128, 32, 6)
	up, _ := quantTensors(t, "model.layers.0.mlp.up_proj", 128, 64, 64, 4)
	lm := f32Tensor("lm_head.weight", 0, 64, 64)
	bias := f32Tensor("model.layers.0.self_attn.q_proj.bias", 0, 64)
	q, _ := quantTensors(t, "model.layers.0.self_attn.q_proj", 64, 64, 64, 4)
	emb, _ := quantTensors(t, "model.embed_tokens", 64, 64, 64, 4)
	ts := slices.Concat(down, up, q, emb, []tensor.Tensor{lm, bias})
	quant := map[string]any{"group_size": 64, "bits": 4, "model.layers.0.mlp.down_proj": map[string]any{"group_size": 32, "bits": 6}, "lm_head": false}
	dir := tinyDir(t, map[string]any{"quantization": quant, "quantization_config": quant}, map[string][]tensor.Tensor{SingleWeightsFile: ts})
	m, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Linear("model.layers.0.mlp.down_proj")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Quantized || l.Bits != 6 || l.GroupSize != 32 || l.Out != 64 || l.In != 128 || l.Bias != nil {
		t.Errorf("down_proj: %+v", l)
	}
	vals, err := l.Dequantize()
	if err != nil {
		t.Fatal(err)
	}
	scales, _ := ToFloat32(l.Scales)
	for i := range vals {
		if d := abs32(vals[i] - downW[i]); d > 1.5*abs32(scales[i/32]) {
			t.Fatalf("down_proj value %d: %v vs %v", i, vals[i], downW[i])
		}
	}
	if l, err := m.Linear("model.layers.0.mlp.up_proj"); err != nil || l.Bits != 4 || l.GroupSize != 64 || l.Out != 128 || l.In != 64 {
		t.Errorf("up_proj: %+v, %v", l, err)
	}
	if l, err := m.Linear("model.layers.0.self_attn.q_proj"); err != nil || l.Bias == nil || l.Bias.Shape[0] != 64 {
		t.Errorf("q_proj: %+v, %v", l, err)
	}
	if l, err := m.Linear("lm_head"); err != nil || l.Quantized || l.Out != 64 {
		t.Errorf("lm_head: %+v, %v", l, err)
	}
	if _, err := m.Linear("model.layers.9.mlp.up_proj"); !errors.Is(err, ErrMissingTensor) {
		t.Errorf("absent module: %v", err)
	}
}

func TestQuantizedLinearShapeErrors(t *testing.T) {
	good, _ := quantTensors(t, "p", 64, 128, 64, 4)
	with := func(i int, t tensor.Tensor) []tensor.Tensor {
		ts := slices.Clone(good)
		ts[i] = t
		return ts
	}
	w, s, b := good[0], good[1], good[2]
	tests := []struct {
		name  string
		ts    []tensor.Tensor
		quant map[string]any
		msg   string
	}{
		{"float weight", with(0, f32Tensor("p.weight", 0, 64, 16)), nil, "want U32"},
		{"weight packed with 3 bits", with(0, u32Tensor("p.weight", make([]uint32, 64*12), 64, 12)), nil, "holds 96 4-bit values per row, scales [64 2] imply 128"},
		{"scales rows", with(1, bf16Tensor("p.scales", make([]float32, 32*2), 32, 2)), nil, "biases"},
		{"scales and biases rows", append(with(1, bf16Tensor("p.scales", make([]float32, 32*2), 32, 2))[:1],
			bf16Tensor("p.scales", make([]float32, 32*2), 32, 2), bf16Tensor("p.biases", make([]float32, 32*2), 32, 2)), nil, "scales have 32 rows"},
		{"biases dtype", with(2, f32Tensor("p.biases", 0, 64, 2)), nil, "differ from scales"},
		{"integer scales", append(with(1, u32Tensor("p.scales", make([]uint32, 128), 64, 2))[:2], u32Tensor("p.biases", make([]uint32, 128), 64, 2)), nil, "float matrix"},
		{"missing biases", []tensor.Tensor{w, s}, nil, "p.biases"},
		{"missing scales under an override", []tensor.Tensor{w, b}, map[string]any{"group_size": 64, "bits": 4, "p": map[string]any{"bits": 4}}, "p.scales"},
		{"group size from override disagrees", good, map[string]any{"group_size": 64, "bits": 4, "p": map[string]any{"group_size": 32}}, "holds 128 4-bit values per row, scales [64 2] imply 64"},
		{"scales but override false", good, map[string]any{"group_size": 64, "bits": 4, "p": false}, "has scales"},
		{"3-D weight", []tensor.Tensor{f32Tensor("p.weight", 0, 2, 2, 2)}, nil, "2 dimensions"},
		{"empty weight with an absurd shape", []tensor.Tensor{{Name: "p.weight", DType: tensor.U32, Shape: []int64{0, 1 << 62}}, s, b}, nil, "beyond any real layer"},
	}
	for _, tc := range tests {
		files := map[string][]tensor.Tensor{SingleWeightsFile: tc.ts}
		q := tc.quant
		if q == nil {
			q = map[string]any{"group_size": 64, "bits": 4}
		}
		dir := tinyDir(t, map[string]any{"quantization": q}, files)
		ws, err := OpenWeights(dir, safetensors.LoadRead)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c, _ := LoadConfig(dir)
		_, err = LookupLinear(ws, c.Quantization, "p")
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error = %v, want one mentioning %q", tc.name, err, tc.msg)
		}
		ws.Close()
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	mk := func(p string) {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte("{}"), 0o644)
	}
	mk("qwen3-demo/config.json")
	mk("llama/config.json")
	mk("no-config/model.safetensors")
	mk("tiny.Q4_K_M.gguf")
	mk("llama.gguf")
	mk("notes.txt")
	mk(".hidden/config.json")
	mk("voice/en.onnx")
	mk("voice/en.onnx.json")
	mk("vad/silero_vad_v6.onnx")
	mk("bare-onnx/model.onnx")
	mk("two-vads/silero_vad.onnx")
	mk("two-vads/silero_vad_v6.onnx")
	mk("rnnoise/rnnoise.bin")
	os.Symlink(filepath.Join(dir, "qwen3-demo"), filepath.Join(dir, "linked"))
	os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "dangling"))
	got, err := Discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"linked", filepath.Join(dir, "linked"), KindSafetensors},
		{"llama", filepath.Join(dir, "llama.gguf"), KindGGUF},
		{"llama", filepath.Join(dir, "llama"), KindSafetensors},
		{"qwen3-demo", filepath.Join(dir, "qwen3-demo"), KindSafetensors},
		{"rnnoise", filepath.Join(dir, "rnnoise"), KindRNNoise},
		{"tiny.Q4_K_M", filepath.Join(dir, "tiny.Q4_K_M.gguf"), KindGGUF},
		{"vad", filepath.Join(dir, "vad"), KindONNX},
		{"voice", filepath.Join(dir, "voice"), KindONNX},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if _, err := Discover(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
}
