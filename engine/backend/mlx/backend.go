//go:build cgo

package mlx

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
	"fusion/engine/tensor"
)

// Backend implements backend.Backend on MLX. Its steps record the ops
// the model calls (checking shapes at once, as the CPU backend does) and
// build and evaluate MLX's graph on the MLX thread only at Eval and Read:
// one round trip to the thread per blocking point, not one per op.
//
// By default it computes as mlx-lm does: activations, KV caches and
// intermediate products in the model's dtype (bf16 for a bf16 or
// bf16-scaled quantized checkpoint), each op in the type MLX's promotion
// gives it. Options.Float32 computes in float32 instead, the CPU
// backend's numbers. Weights keep their file format on the device: dense
// F32/F16/BF16 and MLX affine codes (quantized_matmul); GGUF Q8_0 and
// Q4_0 become MLX affine codes with float32 scales (exact), the K-quants
// (Q2_K to Q6_K) are dequantized to float32 at load (exact, 32 bits per
// weight instead of 2.6–6.6), so GGUF models compute in float32 in either
// mode.
type Backend struct {
	rt  *Runtime
	f32 bool // Options.Float32

	mu     sync.Mutex
	owned  []*Array // weights and norm vectors, freed by Close
	closed bool
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Releaser = (*Backend)(nil)
)

// Options configure a Backend.
type Options struct {
	// MemoryLimit is MLX's memory limit in bytes (allocations past it wait
	// for memory to be freed, or fail); 0 keeps MLX's default.
	MemoryLimit int64
	// CacheLimit is the most freed memory MLX's allocator keeps for reuse,
	// in bytes; 0 keeps MLX's default. (The CPU allocator keeps none.)
	CacheLimit int64
	// Float32 computes activations and KV caches in float32, widening
	// bf16/f16 weights, scales and norm vectors as they are used (the CPU
	// backend's arithmetic, which the parity tests against it need).
	// False, the default, computes in the model's dtype, as mlx-lm does.
	Float32 bool
}

// New opens the MLX thread and applies opts. It fails with Available's
// reason when the library cannot be used.
func New(opts Options) (*Backend, error) {
	if opts.MemoryLimit < 0 || opts.CacheLimit < 0 {
		return nil, fmt.Errorf("mlx: negative memory limit %d or cache limit %d", opts.MemoryLimit, opts.CacheLimit)
	}
	rt, err := Open()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if opts.MemoryLimit > 0 {
		_, err = rt.SetMemoryLimit(ctx, opts.MemoryLimit)
	}
	if opts.CacheLimit > 0 && err == nil {
		_, err = rt.SetCacheLimit(ctx, opts.CacheLimit)
	}
	if err != nil {
		rt.Close()
		return nil, err
	}
	return &Backend{rt: rt, f32: opts.Float32}, nil
}

// Name is "mlx".
func (b *Backend) Name() string { return "mlx" }

// Runtime is the backend's MLX thread (memory counters and limits).
func (b *Backend) Runtime() *Runtime { return b.rt }

// Close frees the weights and stops the MLX thread. KV caches must have
// been freed.
func (b *Backend) Close() error {
	b.mu.Lock()
	owned, closed := b.owned, b.closed
	b.owned, b.closed = nil, true
	b.mu.Unlock()
	if closed {
		return nil
	}
	err := b.rt.Do(context.Background(), func() error {
		for _, x := range owned {
			x.Free()
		}
		return nil
	})
	return errors.Join(err, b.rt.Close())
}

// upload runs fn on the MLX thread with a fresh arena, evaluates the
// arrays it returns, detaches them for the backend to own, and frees the
// rest.
func (b *Backend) upload(fn func(a *Arena) []*Array) ([]*Array, error) {
	var out []*Array
	err := b.rt.Do(context.Background(), func() error {
		a := b.rt.NewArena()
		defer a.Free()
		xs := fn(a)
		if err := a.Eval(xs...); err != nil {
			return err
		}
		for _, x := range xs {
			out = append(out, a.Detach(x))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	b.owned = append(b.owned, out...)
	return out, nil
}

// weight is a matrix on the device.
type weight struct {
	name        string
	out, in     int
	affine      bool
	fp          string // a floating-point mode (mxfp4, mxfp8, nvfp4), or ""
	w           *Array // [out, in] dense, or [out, in·bits/32] uint32 codes
	scales      *Array // affine, fp: [out, in/group] (uint8 for fp)
	biases      *Array // affine: [out, in/group]
	bits, group int
	bias        *Array // [out] (float32 with Options.Float32), or nil
	bytes       int64
	// dt is the type the weight computes in: a dense matrix's, an affine
	// matrix's scales' (what mlx.dequantize gives), float32 for GGUF.
	dt tensor.DType
}

func (w *weight) Out() int     { return w.out }
func (w *weight) In() int      { return w.in }
func (w *weight) Bytes() int64 { return w.bytes }

// vector is a norm weight on the device, in its file's type (float32 with
// Options.Float32).
type vector struct {
	v  *Array
	n  int
	dt tensor.DType
}

func (v *vector) Len() int     { return v.n }
func (v *vector) Bytes() int64 { return int64(v.n * dtypeBytes(v.dt)) }

func floatType(dt tensor.DType) bool {
	return dt == tensor.F32 || dt == tensor.F16 || dt == tensor.BF16
}

// Weight puts d on the device: dense and MLX affine data as stored
// (wrapped; MLX's CPU allocator copies it), GGUF Q8_0 and Q4_0 as MLX
// affine codes with float32 scales (exact), other GGUF blocks dequantized
// to float32.
func (b *Backend) Weight(d backend.WeightData) (backend.Weight, error) {
	if d.Out <= 0 || d.In <= 0 {
		return nil, fmt.Errorf("mlx: %s: shape [%d, %d]", d.Name, d.Out, d.In)
	}
	w := &weight{name: d.Name, out: d.Out, in: d.In}
	var host []float32   // GGUF, dequantized
	var gguf affineCodes // GGUF, mapped to MLX affine codes
	switch d.Format {
	case backend.Dense:
		if !floatType(d.Data.DType) || len(d.Data.Data) != d.Out*d.In*dtypeBytes(d.Data.DType) {
			return nil, fmt.Errorf("mlx: %s: %d bytes of %v for [%d, %d]", d.Name, len(d.Data.Data), d.Data.DType, d.Out, d.In)
		}
	case backend.MLXAffine:
		// The CPU kernels' constructor checks bits, group and every length.
		if _, err := kernels.NewMLXAffine(d.Out, d.In, d.Bits, d.Group, d.Data.Data, d.Scales.Data, d.Biases.Data, d.Scales.DType); err != nil {
			return nil, fmt.Errorf("mlx: %s: %w", d.Name, err)
		}
		if d.Scales.DType != d.Biases.DType {
			return nil, fmt.Errorf("mlx: %s: scales are %v, biases %v", d.Name, d.Scales.DType, d.Biases.DType)
		}
		w.affine, w.bits, w.group, w.dt = true, d.Bits, d.Group, d.Scales.DType
	case backend.MLXFloat:
		// The CPU kernels' constructor checks the mode and every length.
		if _, err := kernels.NewMLXFloat(d.Mode, d.Out, d.In, d.Data.Data, d.Scales.Data); err != nil {
			return nil, fmt.Errorf("mlx: %s: %w", d.Name, err)
		}
		// mlx.dequantize gives bfloat16 for these modes (their
		// scales have no float type to follow).
		w.fp, w.bits, w.group, w.dt = d.Mode, d.Bits, d.Group, tensor.BF16
	case backend.GGUFBlocks:
		g, err := kernels.NewGGUF(d.Data.DType, d.Out, d.In, d.Data.Data)
		if err != nil {
			return nil, fmt.Errorf("mlx: %s: %w", d.Name, err)
		}
		var ok bool
		if gguf, ok = ggufAffine(d.Data.DType, d.Out, d.In, d.Data.Data); ok {
			w.affine, w.bits, w.group = true, gguf.bits, ggufGroup
			break
		}
		host = make([]float32, d.Out*d.In)
		for r := range d.Out {
			kernels.DequantizeRow(host[r*d.In:(r+1)*d.In], g, r)
		}
	default:
		return nil, fmt.Errorf("mlx: %s: unknown weight format %v", d.Name, d.Format)
	}
	switch d.Format {
	case backend.Dense:
		w.dt = d.Data.DType
	case backend.GGUFBlocks:
		w.dt = tensor.F32
	}
	if d.Bias != nil {
		if !floatType(d.Bias.DType) || len(d.Bias.Data) != d.Out*dtypeBytes(d.Bias.DType) {
			return nil, fmt.Errorf("mlx: %s: bias of %d bytes of %v, want %d values", d.Name, len(d.Bias.Data), d.Bias.DType, d.Out)
		}
	}
	xs, err := b.upload(func(a *Arena) []*Array {
		var xs []*Array
		switch {
		case host != nil:
			xs = append(xs, a.FromFloat32(host, d.Out, d.In))
		case gguf.codes != nil:
			xs = append(xs,
				a.FromBytes(tensor.U32, gguf.codes, d.Out, d.In*gguf.bits/32),
				a.FromBytes(tensor.F32, gguf.scales, d.Out, d.In/ggufGroup),
				a.FromBytes(tensor.F32, gguf.biases, d.Out, d.In/ggufGroup))
		case w.affine:
			groups := d.In / d.Group
			xs = append(xs,
				a.Wrap(tensor.U32, d.Data.Data, d.Out, d.In*d.Bits/32),
				a.Wrap(d.Scales.DType, d.Scales.Data, d.Out, groups),
				a.Wrap(d.Biases.DType, d.Biases.Data, d.Out, groups))
		case w.fp != "":
			xs = append(xs,
				a.Wrap(tensor.U32, d.Data.Data, d.Out, d.In*d.Bits/32),
				a.Wrap(tensor.U8, d.Scales.Data, d.Out, d.In/d.Group))
		default:
			xs = append(xs, a.Wrap(d.Data.DType, d.Data.Data, d.Out, d.In))
		}
		if d.Bias != nil {
			bias := a.FromBytes(d.Bias.DType, d.Bias.Data, d.Out)
			if b.f32 && d.Bias.DType != tensor.F32 {
				bias = a.AsType(bias, tensor.F32)
			}
			xs = append(xs, bias)
		}
		return xs
	})
	if err != nil {
		return nil, fmt.Errorf("mlx: %s: %w", d.Name, err)
	}
	w.w = xs[0]
	if w.affine {
		w.scales, w.biases = xs[1], xs[2]
	}
	if w.fp != "" {
		w.scales = xs[1]
	}
	if d.Bias != nil {
		w.bias = xs[len(xs)-1]
	}
	for _, x := range xs {
		w.bytes += int64(x.Size() * dtypeBytes(x.DType()))
	}
	return w, nil
}

func dtypeBytes(dt tensor.DType) int {
	n, _ := dt.ByteSize(1)
	return int(n)
}

// Vector puts a norm weight on the device in its file's type (float32
// with Options.Float32, or when the file's type is not a float MLX has).
func (b *Backend) Vector(d backend.VectorData) (backend.Vector, error) {
	v, err := tensor.Floats(d.Data)
	if err != nil {
		return nil, fmt.Errorf("mlx: %s: %w", d.Name, err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("mlx: %s: empty vector", d.Name)
	}
	dt := d.Data.DType
	native := !b.f32 && floatType(dt) && len(d.Data.Data) == len(v)*dtypeBytes(dt)
	if !native {
		dt = tensor.F32
	}
	xs, err := b.upload(func(a *Arena) []*Array {
		if native {
			return []*Array{a.FromBytes(dt, d.Data.Data, len(v))}
		}
		return []*Array{a.FromFloat32(v, len(v))}
	})
	if err != nil {
		return nil, fmt.Errorf("mlx: %s: %w", d.Name, err)
	}
	return &vector{v: xs[0], n: len(v), dt: dt}, nil
}

// NewStep starts a forward pass; ctx bounds its Eval and Read (while they
// wait for the MLX thread).
func (b *Backend) NewStep(ctx context.Context) backend.Step {
	return &step{ctx: ctx, b: b, a: b.rt.NewArena()}
}

// Release frees the arrays of weights and vectors (a model's, when it
// closes) and forgets them.
func (b *Backend) Release(weights []backend.Weight, vectors []backend.Vector) {
	free := map[*Array]bool{}
	seen := map[backend.Weight]bool{} // a tied head is the embedding
	for _, w := range weights {
		if w == nil || seen[w] {
			continue
		}
		seen[w] = true
		m := wt(w)
		for _, x := range []*Array{m.w, m.scales, m.biases, m.bias} {
			if x != nil {
				free[x] = true
			}
		}
	}
	for _, v := range vectors {
		if v != nil {
			free[v.(*vector).v] = true
		}
	}
	b.mu.Lock()
	kept := b.owned[:0]
	for _, x := range b.owned {
		if !free[x] {
			kept = append(kept, x)
		}
	}
	clear(b.owned[len(kept):])
	b.owned = kept
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return
	}
	_ = b.rt.Do(context.Background(), func() error {
		for x := range free {
			x.Free()
		}
		return nil
	})
}
