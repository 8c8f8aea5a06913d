package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
	"fusion/engine/tensor"
)

func randFloats(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

func f32Tensor(v []float32) tensor.Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(len(v))}, Data: b}
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*max(1, math.Abs(want[i])) {
			t.Fatalf("%s: value %d is %v, want %v (Δ %.2e)", what, i, got[i], want[i], d)
		}
	}
}

func read(t *testing.T, s backend.Step, a backend.Array) []float32 {
	t.Helper()
	v, err := s.Read(a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLinearAndEmbed(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	const out, in, rows = 40, 64, 5
	wv, bias, x := randFloats(rng, out*in), randFloats(rng, out), randFloats(rng, rows*in)
	wt := f32Tensor(wv)
	wt.Shape = []int64{out, in}
	bt := f32Tensor(bias)
	w, err := b.Weight(backend.WeightData{Name: "w", Format: backend.Dense, Out: out, In: in, Data: wt, Bias: &bt})
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := int64(4 * (out*in + out))
	if b.Kernels().PackedFast() { // F32 matrices are packed, their last panel padded
		wantBytes = int64(4 * (kernels.PackedLen(out, in) + out))
	}
	if w.Bytes() != wantBytes {
		t.Errorf("Bytes = %d, want %d", w.Bytes(), wantBytes)
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	got := read(t, s, s.Linear(s.Input(rows, in, x), w))
	want := make([]float64, rows*out)
	for r := range rows {
		for o := range out {
			acc := float64(bias[o])
			for i := range in {
				acc += float64(x[r*in+i]) * float64(wv[o*in+i])
			}
			want[r*out+o] = acc
		}
	}
	closeTo(t, "Linear", got, want, 1e-5)

	emb := read(t, s, s.Embed(w, []int32{3, 0, 39, 3}))
	for i, id := range []int{3, 0, 39, 3} {
		for j := range in {
			if emb[i*in+j] != wv[id*in+j] {
				t.Fatalf("Embed row %d: value %d is %v, want %v", i, j, emb[i*in+j], wv[id*in+j])
			}
		}
	}
}

func TestRMSNorm(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, group := range []int{48, 12} { // the whole row; per head
		const rows, cols = 3, 48
		x, wv := randFloats(rng, rows*cols), randFloats(rng, group)
		w, err := b.Vector(backend.VectorData{Name: "norm", Data: f32Tensor(wv)})
		if err != nil {
			t.Fatal(err)
		}
		s := b.NewStep(context.Background())
		got := read(t, s, s.RMSNorm(s.Input(rows, cols, x), w, 1e-5))
		s.Close()
		want := make([]float64, rows*cols)
		for g := 0; g < rows*cols; g += group {
			var ss float64
			for _, v := range x[g : g+group] {
				ss += float64(v) * float64(v)
			}
			r := 1 / math.Sqrt(ss/float64(group)+1e-5)
			for i := range group {
				want[g+i] = float64(x[g+i]) * r * float64(wv[i])
			}
		}
		closeTo(t, "RMSNorm", got, want, 1e-5)
	}
}

func TestRoPE(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	batch := &backend.Batch{Seqs: []backend.Seq{{Offset: 0, Len: 3}, {Offset: 100, Len: 1}, {Offset: 7, Len: 2}}}
	positions := []int{0, 1, 2, 100, 7, 8}
	periods := make([]float32, 6)
	for i := range periods {
		periods[i] = float32(math.Pow(500, float64(i)/6)) * 1.5
	}
	cases := []struct {
		name string
		r    backend.RoPE
	}{
		{"halves", backend.RoPE{HeadDim: 16, Dims: 16, Base: 10000}},
		{"pairs", backend.RoPE{HeadDim: 16, Dims: 16, Base: 10000, Traditional: true}},
		{"partial+scale", backend.RoPE{HeadDim: 16, Dims: 12, Base: 500, Scale: 0.25}},
		{"freqs+mscale", backend.RoPE{HeadDim: 16, Dims: 12, Freqs: periods, InputScale: 1.2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const heads = 3
			x := randFloats(rng, len(positions)*heads*16)
			s := b.NewStep(context.Background())
			defer s.Close()
			got := read(t, s, s.RoPE(s.Input(len(positions), heads*16, x), &c.r, batch))
			r := c.r
			scale, in := 1.0, 1.0
			if r.Scale != 0 {
				scale = float64(r.Scale)
			}
			if r.InputScale != 0 {
				in = float64(r.InputScale)
			}
			want := make([]float64, len(x))
			for i := range x {
				want[i] = float64(x[i])
			}
			half := r.Dims / 2
			for row, p := range positions {
				for h := range heads {
					base := (row*heads + h) * 16
					for i := range half {
						f := math.Pow(r.Base, -2*float64(i)/float64(r.Dims))
						if r.Freqs != nil {
							f = 1 / float64(r.Freqs[i])
						}
						theta := float64(p) * scale * f
						i1, i2 := base+i, base+i+half
						if r.Traditional {
							i1, i2 = base+2*i, base+2*i+1
						}
						x1, x2 := float64(x[i1])*in, float64(x[i2])*in
						want[i1] = x1*math.Cos(theta) - x2*math.Sin(theta)
						want[i2] = x1*math.Sin(theta) + x2*math.Cos(theta)
					}
				}
			}
			closeTo(t, "RoPE", got, want, 1e-4)
		})
	}
}

// naiveAttention is causal attention in float64 over a sequence's whole
// keys and values ([n, kvh·hd]), for its last len(q)/(heads·hd) rows;
// with window > 0, the query at position p sees positions p−window+1 … p;
// with sinks, head h's softmax also counts e^{sinks[h]} in its sum.
func naiveAttention(q, k, v []float32, heads, kvh, hd, offset int, scale float64, window int, sinks []float32) []float64 {
	rows := len(q) / (heads * hd)
	out := make([]float64, len(q))
	for i := range rows {
		pos := offset + i
		for h := range heads {
			g := h / (heads / kvh)
			scores := make([]float64, pos+1)
			m := math.Inf(-1)
			for j := range scores {
				if window > 0 && j <= pos-window {
					scores[j] = math.Inf(-1)
					continue
				}
				var d float64
				for e := range hd {
					d += float64(q[(i*heads+h)*hd+e]) * scale * float64(k[(j*kvh+g)*hd+e])
				}
				scores[j] = d
				m = max(m, d)
			}
			var sum float64
			if sinks != nil {
				m = max(m, float64(sinks[h]))
				sum = math.Exp(float64(sinks[h]) - m)
			}
			for j := range scores {
				scores[j] = math.Exp(scores[j] - m)
				sum += scores[j]
			}
			for j := range scores {
				for e := range hd {
					out[(i*heads+h)*hd+e] += scores[j] / sum * float64(v[(j*kvh+g)*hd+e])
				}
			}
		}
	}
	return out
}

func TestAttention(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		name              string
		heads, kvh, hd    int
		history, newToken []int // per sequence: positions already cached, new rows
		window            int   // > 0: WindowAttention
		sinks             bool  // SinkAttention, a sink logit per head
	}{
		{"gqa-prefill", 4, 2, 32, []int{0}, []int{BlockSize + 50}, 0, false},
		{"mha-decode", 2, 2, 16, []int{BlockSize + 70}, []int{1}, 0, false},
		{"gqa-mixed-batch", 6, 2, 24, []int{63, 0, 2*BlockSize - 3}, []int{1, 40, 5}, 0, false},
		{"block-boundary", 2, 1, 8, []int{BlockSize - 1}, []int{1}, 0, false},
		// Windows smaller than the sequences, crossing block boundaries.
		{"window-prefill", 4, 2, 16, []int{0}, []int{2*BlockSize + 30}, 100, false},
		{"window-decode", 2, 1, 8, []int{2*BlockSize + 5}, []int{1}, BlockSize + 3, false},
		{"window-mixed-batch", 6, 2, 8, []int{BlockSize + 40, 0, 3, 2 * BlockSize}, []int{1, 90, 40, 33}, 17, false},
		{"window-wider-than-sequence", 2, 2, 8, []int{10}, []int{20}, 4 * BlockSize, false},
		// gpt-oss's sinks, with and without a window.
		{"sinks-prefill", 4, 2, 16, []int{0}, []int{BlockSize + 50}, 0, true},
		{"sinks-decode", 4, 1, 8, []int{BlockSize + 9}, []int{1}, 0, true},
		{"sinks-window-mixed-batch", 6, 2, 8, []int{BlockSize + 40, 0, 3}, []int{1, 90, 40}, 17, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := backend.KVSpec{FirstLayer: 2, Layers: 2, KVHeads: c.kvh, HeadDim: c.hd, MaxLen: 4 * BlockSize}
			qw, kw := c.heads*c.hd, c.kvh*c.hd
			batch := &backend.Batch{}
			var ks, vs [][]float32
			for i, h := range c.history {
				cache, err := b.NewKVCache(spec)
				if err != nil {
					t.Fatal(err)
				}
				k, v := randFloats(rng, (h+c.newToken[i])*kw), randFloats(rng, (h+c.newToken[i])*kw)
				ks, vs = append(ks, k), append(vs, v)
				if h > 0 { // fill the history through the op itself, at layer 3
					s := b.NewStep(context.Background())
					hb := &backend.Batch{Seqs: []backend.Seq{{Cache: cache, Offset: 0, Len: h}}}
					s.Attention(3, s.Input(h, qw, randFloats(rng, h*qw)), s.Input(h, kw, k[:h*kw]), s.Input(h, kw, v[:h*kw]), 1, hb)
					s.Close()
				}
				batch.Seqs = append(batch.Seqs, backend.Seq{Cache: cache, Offset: h, Len: c.newToken[i]})
			}
			rows := batch.Rows()
			q := randFloats(rng, rows*qw)
			var knew, vnew []float32
			for i, sq := range batch.Seqs {
				knew = append(knew, ks[i][sq.Offset*kw:]...)
				vnew = append(vnew, vs[i][sq.Offset*kw:]...)
			}
			scale := 1 / math.Sqrt(float64(c.hd))
			s := b.NewStep(context.Background())
			defer s.Close()
			var out backend.Array
			var sinks []float32
			if c.sinks {
				// Logits of the scale of the scores, some far above them.
				sinks = randFloats(rng, c.heads)
				for h := range sinks {
					sinks[h] = sinks[h]*2 + float32(h%3)
				}
				sv, err := b.Vector(backend.VectorData{Name: "sinks", Data: f32Tensor(sinks)})
				if err != nil {
					t.Fatal(err)
				}
				out = s.SinkAttention(3, s.Input(rows, qw, q), s.Input(rows, kw, knew), s.Input(rows, kw, vnew), float32(scale), c.window, sv, batch)
			} else if c.window > 0 {
				out = s.WindowAttention(3, s.Input(rows, qw, q), s.Input(rows, kw, knew), s.Input(rows, kw, vnew), float32(scale), c.window, batch)
			} else {
				out = s.Attention(3, s.Input(rows, qw, q), s.Input(rows, kw, knew), s.Input(rows, kw, vnew), float32(scale), batch)
			}
			got := read(t, s, out)
			row := 0
			for i, sq := range batch.Seqs {
				if n := sq.Cache.Len(3); n != sq.Offset+sq.Len {
					t.Errorf("sequence %d: cache holds %d positions at layer 3, want %d", i, n, sq.Offset+sq.Len)
				}
				if n := sq.Cache.Len(2); n != 0 {
					t.Errorf("sequence %d: layer 2 holds %d positions, want 0", i, n)
				}
				want := naiveAttention(q[row*qw:(row+sq.Len)*qw], ks[i], vs[i], c.heads, c.kvh, c.hd, sq.Offset, scale, c.window, sinks)
				closeTo(t, "Attention", got[row*qw:(row+sq.Len)*qw], want, 1e-5)
				row += sq.Len
			}
		})
	}
}

func TestKVCacheMemory(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	const long = BlockSize + 6 // two blocks
	spec := backend.KVSpec{FirstLayer: 0, Layers: 3, KVHeads: 2, HeadDim: 8, MaxLen: long + 100}
	c, err := b.NewKVCache(spec)
	if err != nil {
		t.Fatal(err)
	}
	perPos := int64(2 * 2 * 8 * 4) // K and V, per layer
	block := int64(BlockSize) * perPos * 3
	write := func(layer, off, n int) {
		c.(*KVCache).write(layer, off, make([]float32, n*16), make([]float32, n*16), n)
	}
	for _, tc := range []struct {
		name         string
		do           func()
		alloc, used  int64
		lenL0, lenL2 int
	}{
		{"empty", func() {}, 0, 0, 0, 0},
		{"one layer 10", func() { write(0, 0, 10) }, block, 10 * perPos, 10, 0},
		{"all layers long", func() { write(0, 10, long-10); write(1, 0, long); write(2, 0, long) }, 2 * block, 3 * long * perPos, long, long},
		{"truncate 30", func() { c.Truncate(30) }, block, 90 * perPos, 30, 30},
		{"rewrite from 20", func() { write(2, 20, 5) }, block, 85 * perPos, 30, 25},
	} {
		tc.do()
		alloc, used := c.Bytes()
		if alloc != tc.alloc || used != tc.used || c.Len(0) != tc.lenL0 || c.Len(2) != tc.lenL2 {
			t.Errorf("%s: bytes (%d, %d), lens (%d, %d); want (%d, %d), (%d, %d)",
				tc.name, alloc, used, c.Len(0), c.Len(2), tc.alloc, tc.used, tc.lenL0, tc.lenL2)
		}
	}
	for _, bad := range []struct {
		name string
		f    func()
	}{
		{"gap", func() { write(0, 31, 1) }},
		{"beyond MaxLen", func() { write(0, 30, long+71) }},
		{"layer outside", func() { write(3, 0, 1) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", bad.name)
				}
			}()
			bad.f()
		}()
	}
	c.Free()
	if alloc, used := c.Bytes(); alloc != 0 || used != 0 {
		t.Errorf("after Free: (%d, %d)", alloc, used)
	}
}

// Release keeps one array (moving it down to the mark) and reuses the
// memory of the others; steps reuse the arena of earlier steps.
func TestArenaRelease(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	for range 3 {
		s := b.NewStep(context.Background())
		x := s.Input(2, 3, []float32{1, 2, 3, 4, 5, 6})
		for range 10 {
			m := s.Mark()
			y := s.Add(x, x)
			z := s.Add(y, s.Input(2, 3, make([]float32, 6)))
			x = s.Release(m, z)
		}
		got := read(t, s, x)
		for i, v := range got {
			if want := float32(i+1) * 1024; v != want {
				t.Fatalf("value %d = %v, want %v", i, v, want)
			}
		}
		big := s.Input(1, minChunk+5, make([]float32, minChunk+5)) // a second chunk
		m := s.Mark()
		keep := s.Release(m, s.Add(big, big))
		if keep.Cols() != minChunk+5 {
			t.Fatalf("kept array has %d columns", keep.Cols())
		}
		s.Close()
	}
	if got := b.ArenaBytes(); got > 4*4*(minChunk+5)+4*minChunk {
		t.Errorf("arena holds %d bytes after three identical steps", got)
	}
}
