package model

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/backend/cpu/kernels"
	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// editConfig rewrites keys of dir's config.json.
func editConfig(t *testing.T, dir string, set map[string]any) {
	t.Helper()
	if err := editJSON(filepath.Join(dir, "config.json"), set); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, tc := range []struct {
		name   string
		config map[string]any
		opts   Options
		want   error
	}{
		{"layers past the end", nil, Options{Layers: Range{2, 5}}, nil},
		{"empty layer range", nil, Options{Layers: Range{2, 2}}, nil},
		{"missing layer weights", map[string]any{"num_hidden_layers": 5}, Options{}, ErrBadWeights},
		{"intermediate size disagrees", map[string]any{"intermediate_size": 256}, Options{}, ErrBadWeights},
		{"kv heads disagree", map[string]any{"num_key_value_heads": 4}, Options{}, ErrBadWeights},
		{"dynamic rope", map[string]any{"rope_scaling": map[string]any{"rope_type": "dynamic", "factor": 2.0}}, Options{}, modelfile.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := smallModel(t, "qwen3", demo.Options{})
			if tc.config != nil {
				editConfig(t, dir, tc.config)
			}
			m, err := Load(context.Background(), dir, be, tc.opts)
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestForwardErrors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	path := smallModel(t, "llama", demo.Options{})
	m := load(t, be, path, Range{})
	stage := load(t, be, path, Range{2, 4})
	other := load(t, be, path, Range{})
	seq, full := newSeq(t, m), newSeq(t, m)
	short, err := m.NewSequence(4)
	if err != nil {
		t.Fatal(err)
	}
	forward(t, m, []Input{{Seq: full, Tokens: tokens(1, 5)}}, Range{0, 2}, nil) // layers 0-1 ahead of 2-3
	for _, tc := range []struct {
		name   string
		m      *Model
		in     []Input
		layers Range
		hidden *Hidden
	}{
		{"no inputs", m, nil, Range{}, nil},
		{"no tokens", m, []Input{{Seq: seq}}, Range{}, nil},
		{"token outside the vocabulary", m, []Input{{Seq: seq, Tokens: []int{640}}}, Range{}, nil},
		{"negative token", m, []Input{{Seq: seq, Tokens: []int{-1}}}, Range{}, nil},
		{"sequence twice", m, []Input{{Seq: seq, Tokens: []int{1}}, {Seq: seq, Tokens: []int{2}}}, Range{}, nil},
		{"sequence of another model", other, []Input{{Seq: seq, Tokens: []int{1}}}, Range{}, nil},
		{"layers outside the loaded ones", stage, []Input{{Seq: newSeq(t, stage), Len: 1}}, Range{1, 4}, &Hidden{Rows: 1, Cols: 256, Data: make([]float32, 256)}},
		{"first layer without tokens", m, []Input{{Seq: seq, Len: 1}}, Range{}, nil},
		{"later stage without hidden", stage, []Input{{Seq: newSeq(t, stage), Len: 1}}, Range{}, nil},
		{"hidden of the wrong size", stage, []Input{{Seq: newSeq(t, stage), Len: 2}}, Range{}, &Hidden{Rows: 1, Cols: 256, Data: make([]float32, 256)}},
		{"layers out of step", m, []Input{{Seq: full, Tokens: []int{1}}}, Range{}, nil},
		{"beyond the sequence's length", m, []Input{{Seq: short, Tokens: tokens(2, 5)}}, Range{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.m.Forward(context.Background(), tc.in, tc.layers, tc.hidden); !errors.Is(err, ErrBadInput) {
				t.Errorf("error %v, want ErrBadInput", err)
			}
		})
	}
}

// A cancelled step leaves the sequence where it was.
func TestForwardCancelled(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m := load(t, be, smallModel(t, "qwen3", demo.Options{}), Range{})
	seq := newSeq(t, m)
	forward(t, m, []Input{{Seq: seq, Tokens: tokens(1, 20)}}, Range{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, []Input{{Seq: seq, Tokens: tokens(2, 10)}}, Range{}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if seq.Len() != 20 {
		t.Errorf("sequence holds %d positions after a cancelled step, want 20", seq.Len())
	}
}

// Steps on different sequences may run concurrently and give the same
// logits as run one after the other.
func TestConcurrentForward(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m := load(t, be, smallModel(t, "qwen3", demo.Options{Quantize: 4, GroupSize: 64}), Range{})
	want := make([][]float32, 4)
	for i := range want {
		want[i] = forward(t, m, []Input{{Seq: newSeq(t, m), Tokens: tokens(i, 30+i)}}, Range{}, nil).Logits[0]
	}
	got := make([][]float32, 4)
	seqs := []*Sequence{newSeq(t, m), newSeq(t, m), newSeq(t, m), newSeq(t, m)}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := m.Forward(context.Background(), []Input{{Seq: seqs[i], Tokens: tokens(i, 30+i)}}, Range{}, nil)
			if errs[i] = err; err == nil {
				got[i] = out.Logits[0]
			}
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		sameBits(t, "concurrent step", got[i], want[i])
	}
}

// Memory is reported exactly: the weights the backend holds (a MoE's
// experts included) and the KV cache's blocks and positions.
func TestMemory(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, f := range formats {
		for _, arch := range f.archs {
			if arch != "llama" {
				t.Run(f.name+"/"+arch, func(t *testing.T) { checkMemory(t, be, smallModel(t, arch, f.opts), f.opts) })
			}
		}
	}
}

func checkMemory(t *testing.T, be *cpu.Backend, path string, opts demo.Options) {
	t.Helper()
	m := load(t, be, path, Range{})
	// Norm weights and biases are widened to f32; everything else is
	// used as stored (the embedding once, as it is tied).
	var tensors []tensor.Tensor
	if opts.Format == demo.FormatGGUF {
		gf, err := gguf.Open(path, gguf.LoadRead)
		if err != nil {
			t.Fatal(err)
		}
		defer gf.Close()
		tensors = gf.Tensors
	} else {
		mf, err := modelfile.Open(path, modelfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer mf.Close()
		for _, name := range mf.Weights.Names() {
			if !strings.HasPrefix(name, mf.Config.WeightPrefix) {
				continue // mistral3's vision tower, which is not loaded
			}
			tt, _ := mf.Weights.Tensor(name)
			tensors = append(tensors, tt)
		}
	}
	var want int64
	for _, tt := range tensors {
		if len(tt.Shape) == 1 || strings.HasSuffix(tt.Name, ".bias") || strings.HasSuffix(tt.Name, ".conv1d.weight") {
			// Norms and biases (gpt-oss's stacked expert biases too)
			// are widened to f32.
			n := int64(1)
			for _, d := range tt.Shape {
				n *= d
			}
			want += 4 * n
		} else if len(tt.Shape) == 2 && tt.DType == tensor.F32 && kernels.Default().PackedFast() {
			// F32 matrices (a GGUF mixture's router) are repacked into
			// panels of kernels.PanelRows rows, the last one padded.
			want += 4 * int64(kernels.PackedLen(int(tt.Shape[0]), int(tt.Shape[1])))
		} else {
			want += int64(len(tt.Data))
		}
	}
	if d := m.Config.DeltaNet; d != nil {
		want += 4 * int64(d.KeyDim) // the unit weight of the q/k L2 norm
	}
	if m.WeightBytes() != want {
		t.Errorf("WeightBytes = %d, want %d", m.WeightBytes(), want)
	}
	seq := newSeq(t, m)
	forward(t, m, []Input{{Seq: seq, Tokens: tokens(1, 300)}}, Range{}, nil)
	alloc, used := seq.CacheBytes()
	// Only attention layers have a KV cache (a DeltaNet layer's state is
	// not in it): KVBytesPerToken counts them alone.
	usedPer := m.KVBytesPerToken()
	if d := m.Config.DeltaNet; d != nil {
		attn := int64(0)
		for l := range m.Config.NumHiddenLayers {
			if !d.Linear(l) {
				attn++
			}
		}
		if want := attn * int64(m.kvHeads*m.headDim*2*4); usedPer != want {
			t.Errorf("KVBytesPerToken = %d, want %d (%d attention layers)", usedPer, want, attn)
		}
	}
	rec := m.RecurrentBytes() // with the sequence, whatever its length
	if used != 300*usedPer+rec || alloc != 2*cpu.BlockSize*m.KVBytesPerToken()+rec {
		t.Errorf("cache bytes (%d, %d), want (%d, %d)", alloc, used, 2*cpu.BlockSize*m.KVBytesPerToken()+rec, 300*usedPer+rec)
	}
	seq.Truncate(10)
	if alloc, used := seq.CacheBytes(); used != 10*usedPer+rec || alloc != cpu.BlockSize*m.KVBytesPerToken()+rec {
		t.Errorf("after Truncate(10): cache bytes (%d, %d)", alloc, used)
	}
}
