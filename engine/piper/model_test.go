package piper

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"fusion/engine/audio/audiotest"
	"fusion/engine/backend/cpu"
)

// withOutputs returns the ONNX model b with more graph outputs (float
// tensors of any shape), so that onnxruntime reports intermediate values:
// the graph message (ModelProto field 7) gets ValueInfoProto entries in
// its field 12.
func withOutputs(t *testing.T, b []byte, names ...string) []byte {
	t.Helper()
	var out []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal("bad model")
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatal("bad model")
		}
		field := b[:n+m]
		if num == 7 && typ == protowire.BytesType {
			graph, _ := protowire.ConsumeBytes(b[n:])
			graph = append([]byte(nil), graph...)
			for _, name := range names {
				tensorType := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1) // elem_type FLOAT
				typeProto := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), tensorType)
				vi := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte(name))
				vi = protowire.AppendBytes(protowire.AppendTag(vi, 2, protowire.BytesType), typeProto)
				graph = protowire.AppendBytes(protowire.AppendTag(graph, 12, protowire.BytesType), vi)
			}
			field = protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), graph)
		}
		out = append(out, field...)
		b = b[n+m:]
	}
	return out
}

// ortRun runs the voice through onnxruntime with the noise scales at 0
// and returns the named outputs, flattened row-major, with their shapes.
func ortRun(t *testing.T, model string, ids []int64, lengthScale float32, names ...string) map[string]ortValue {
	t.Helper()
	py := audiotest.Python(t, "onnxruntime", "numpy")
	script := `
import json, sys
import numpy as np, onnxruntime as ort
names = json.loads(sys.argv[3])
ids = np.array([json.loads(sys.argv[2])], dtype=np.int64)
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
res = s.run(names, {"input": ids, "input_lengths": np.array([ids.shape[1]], dtype=np.int64),
                    "scales": np.array([0, float(sys.argv[4]), 0], dtype=np.float32)})
print(json.dumps({n: {"shape": list(r.shape), "data": r.astype(np.float64).ravel().tolist()} for n, r in zip(names, res)}))
`
	idj, _ := json.Marshal(ids)
	nj, _ := json.Marshal(names)
	out, err := exec.Command(py, "-c", script, model, string(idj), string(nj), fmt.Sprint(lengthScale)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("onnxruntime: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("onnxruntime: %v", err)
	}
	var res map[string]ortValue
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

type ortValue struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

// joe loads the real voice once for the package's tests, on the CPU.
var joe struct {
	once  sync.Once
	v     *Voice
	model string
	err   error
}

func loadJoe(t *testing.T) (*Voice, string) {
	t.Helper()
	_, dir := joeConfig(t)
	joe.once.Do(func() {
		joe.model = filepath.Join(dir, "en_US-joe-medium.onnx")
		joe.v, joe.err = Load(context.Background(), dir, cpu.New(cpu.Options{}))
	})
	if joe.err != nil {
		t.Fatal(joe.err)
	}
	return joe.v, joe.model
}

// transposed reads a [1, C, T] reference as [T, C] rows.
func transposed(v ortValue) []float64 {
	c, n := v.Shape[1], v.Shape[2]
	out := make([]float64, len(v.Data))
	for ch := range c {
		for t := range n {
			out[t*c+ch] = v.Data[ch*n+t]
		}
	}
	return out
}

func maxAbsDiff(got []float32, want []float64) float64 {
	var d float64
	for i := range got {
		d = max(d, math.Abs(float64(got[i])-want[i]))
	}
	return d
}

// TestVoiceMatchesONNX runs the real voice over a sentence's ids and
// compares every stage with onnxruntime's values of the same tensors in
// Piper's graph (noise scales 0, length scale 1): the text encoder's
// hidden states, the prior's mean and log-scale, the log-durations, the
// frame counts, and the waveform after the flow and the HiFi-GAN decoder.
func TestVoiceMatchesONNX(t *testing.T) {
	v, model := loadJoe(t)
	c := v.Config
	if v.Dims != (Dims{Hidden: 192, Heads: 2, HeadDim: 96, Filter: 768, FFNKernel: 3, Layers: 6}) {
		t.Errorf("dims %+v", v.Dims)
	}
	sents, err := Espeak{}.Phonemize(context.Background(), c.Espeak.Voice, "Glue the sheet.")
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := c.IDs(sents[0])
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"/enc_p/encoder/Mul_2_output_0", "/enc_p/Split_output_0", "/enc_p/Split_output_1", "/dp/Split_output_0", "/Ceil_output_0", "output"}
	tmp := filepath.Join(t.TempDir(), "voice.onnx")
	if err := os.WriteFile(tmp, withOutputs(t, b, names...), 0o600); err != nil {
		t.Fatal(err)
	}
	want := ortRun(t, tmp, ids, 1, names...)
	got, err := v.EncodeText(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	frames, logw, err := v.Durations(context.Background(), got, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := maxAbsDiff(logw, want["/dp/Split_output_0"].Data)
	t.Logf("log-durations: max |ours − onnxruntime| %.3g", d)
	if d > 1e-3 {
		t.Errorf("log-durations differ by up to %.3g", d)
	}
	for i, f := range frames {
		if w := want["/Ceil_output_0"].Data[i]; float64(f) != w {
			t.Errorf("phoneme %d: %d frames, onnxruntime %v (log w %v vs %v)", i, f, w, logw[i], want["/dp/Split_output_0"].Data[i])
		}
	}
	samples, err := v.Synthesize(context.Background(), ids, Scales{Length: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := want["output"].Data
	if len(samples) != len(ref) {
		t.Fatalf("%d samples, onnxruntime %d", len(samples), len(ref))
	}
	var num, den float64
	for i, x := range samples {
		num += (float64(x) - ref[i]) * (float64(x) - ref[i])
		den += ref[i] * ref[i]
	}
	d = maxAbsDiff(samples, ref)
	t.Logf("waveform: %d samples, max |ours − onnxruntime| %.3g, relative RMS error %.3g", len(samples), d, math.Sqrt(num/den))
	if d > 1e-3 {
		t.Errorf("waveform differs by up to %.3g", d)
	}
	for i, g := range [][]float32{got.Hidden, got.Mean, got.LogStd} {
		w := want[names[i]]
		if len(w.Shape) != 3 || w.Shape[2] != len(ids) || len(g) != len(w.Data) {
			t.Fatalf("%s: shape %v for %d ids, we have %d values", names[i], w.Shape, len(ids), len(g))
		}
		d := maxAbsDiff(g, transposed(w))
		t.Logf("%s: max |ours − onnxruntime| %.3g over %d phoneme ids", names[i], d, len(ids))
		if d > 1e-3 {
			t.Errorf("%s: max difference %.3g over 1e-3", names[i], d)
		}
	}
}
