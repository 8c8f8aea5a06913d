//go:build cgo

package mlx

/*
#include <stdint.h>
#include <stdlib.h>
#include "errors.h"

extern void fusionMLXRelease(void* payload);

static mlx_array fusion_mlx_wrap(void* data, const int* shape, int dim, mlx_dtype dtype, uintptr_t handle) {
  uintptr_t* payload = malloc(sizeof(uintptr_t));
  *payload = handle;
  return mlx_array_new_data_managed_payload(data, shape, dim, dtype, payload, fusionMLXRelease);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync/atomic"
	"unsafe"

	"fusion/engine/tensor"
)

// Array is an MLX array handle: lazy until evaluated. It belongs to the
// Arena that made it (or, after Detach, to the caller) and is only used
// on the MLX thread.
type Array struct {
	c      C.mlx_array
	shape  []int
	dtype  tensor.DType
	copied bool
}

// Shape is the array's shape (known before evaluation).
func (x *Array) Shape() []int { return x.shape }

// DType is the array's element type.
func (x *Array) DType() tensor.DType { return x.dtype }

// Size is the number of elements (0 for an empty handle: a failed op's).
func (x *Array) Size() int {
	if x.c.ctx == nil {
		return 0
	}
	n := 1
	for _, d := range x.shape {
		n *= d
	}
	return n
}

// Free drops the handle (inside Do). Freeing twice, or an array an arena
// still holds, is a bug.
func (x *Array) Free() {
	if x.c.ctx != nil {
		C.mlx_array_free(x.c)
		x.c.ctx = nil
	}
}

var dtypes = map[tensor.DType]C.mlx_dtype{
	tensor.Bool: C.MLX_BOOL,
	tensor.U8:   C.MLX_UINT8, tensor.U16: C.MLX_UINT16, tensor.U32: C.MLX_UINT32, tensor.U64: C.MLX_UINT64,
	tensor.I8: C.MLX_INT8, tensor.I16: C.MLX_INT16, tensor.I32: C.MLX_INT32, tensor.I64: C.MLX_INT64,
	tensor.F16: C.MLX_FLOAT16, tensor.F32: C.MLX_FLOAT32, tensor.F64: C.MLX_FLOAT64, tensor.BF16: C.MLX_BFLOAT16,
}

func toMLX(dt tensor.DType) C.mlx_dtype {
	d, ok := dtypes[dt]
	if !ok {
		panic(fmt.Sprintf("mlx: no MLX type for %v", dt))
	}
	return d
}

func fromMLX(d C.mlx_dtype) tensor.DType {
	for t, m := range dtypes {
		if m == d {
			return t
		}
	}
	return tensor.Invalid
}

// Arena owns the arrays of a unit of work (a forward step): every op
// result is registered, and Release or Free drops them, so no graph node
// outlives its step unless detached (weights, KV caches). Ops do not
// return errors: the first MLX failure is kept (Err) and later ops become
// no-ops returning empty arrays. All methods run on the MLX thread, inside
// Runtime.Do; an Arena may be used across several Do calls.
type Arena struct {
	rt     *Runtime
	arrays []*Array
	err    error
}

// NewArena makes an empty arena for arrays computed on r.
func (r *Runtime) NewArena() *Arena { return &Arena{rt: r} }

// Err is the first failure of the arena's ops.
func (a *Arena) Err() error { return a.err }

// Len is the number of arrays the arena holds.
func (a *Arena) Len() int { return len(a.arrays) }

// Mark is a position for Release.
func (a *Arena) Mark() int { return len(a.arrays) }

// Release frees the arrays made since mark m, except keep, which stay in
// the arena.
func (a *Arena) Release(m int, keep ...*Array) {
	kept := a.arrays[:m]
	for _, x := range a.arrays[m:] {
		if contains(keep, x) {
			kept = append(kept, x)
			continue
		}
		x.Free()
	}
	clear(a.arrays[len(kept):])
	a.arrays = kept
}

func contains(xs []*Array, x *Array) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Detach removes x from the arena: the caller frees it (weights, caches).
func (a *Arena) Detach(x *Array) *Array {
	for i := len(a.arrays) - 1; i >= 0; i-- {
		if a.arrays[i] == x {
			a.arrays = append(a.arrays[:i], a.arrays[i+1:]...)
			return x
		}
	}
	panic("mlx: Detach of an array the arena does not hold")
}

// Drop frees x and removes it from the arena.
func (a *Arena) Drop(x *Array) {
	a.Detach(x).Free()
}

// Free frees every array of the arena; it can be used again afterwards.
func (a *Arena) Free() { a.Release(0) }

// adopt registers a new handle, reading its shape and type.
func (a *Arena) adopt(c C.mlx_array) *Array {
	n := int(C.mlx_array_ndim(c))
	x := &Array{c: c, dtype: fromMLX(C.mlx_array_dtype(c)), shape: make([]int, n)}
	if n > 0 {
		dims := unsafe.Slice(C.mlx_array_shape(c), n)
		for i, d := range dims {
			x.shape[i] = int(d)
		}
	}
	a.arrays = append(a.arrays, x)
	return x
}

// op calls an mlx-c op writing into a new array, after checking the
// inputs; on failure it records the error and returns an empty array.
func (a *Arena) op(name string, in []*Array, f func(res *C.mlx_array) C.int) *Array {
	if a.err != nil {
		return &Array{}
	}
	for _, x := range in {
		if x == nil || x.c.ctx == nil {
			a.err = &Error{Op: name, Msg: "an input array is empty (freed, or from a failed op)"}
			return &Array{}
		}
	}
	res := C.mlx_array_new()
	if err := check(name, func() C.int { return f(&res) }); err != nil {
		C.mlx_array_free(res)
		a.err = err
		return &Array{}
	}
	return a.adopt(res)
}

func cints(xs []int) []C.int {
	out := make([]C.int, len(xs))
	for i, x := range xs {
		out[i] = C.int(x)
	}
	return out
}

func ptr(xs []C.int) *C.int {
	if len(xs) == 0 {
		return nil
	}
	return &xs[0]
}

// checkData panics unless data holds exactly the elements of shape.
func checkData(what string, dt tensor.DType, n int, shape []int) {
	elems := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("mlx: %s: negative dimension in %v", what, shape))
		}
		elems *= d
	}
	size, err := dt.ByteSize(int64(elems))
	if err != nil || dt.Quantized() || size != int64(n) || elems == 0 {
		panic(fmt.Sprintf("mlx: %s: %d bytes of %v for shape %v", what, n, dt, shape))
	}
}

// FromBytes makes an array of type dt and the given shape from a copy of
// data (little-endian elements, row-major).
func (a *Arena) FromBytes(dt tensor.DType, data []byte, shape ...int) *Array {
	checkData("FromBytes", dt, len(data), shape)
	if a.err != nil {
		return &Array{}
	}
	cs := cints(shape)
	return a.create("mlx_array_new_data", func() C.mlx_array {
		return C.mlx_array_new_data(unsafe.Pointer(&data[0]), ptr(cs), C.int(len(cs)), toMLX(dt))
	})
}

// create registers the array a constructor returns, or records its
// failure (an empty handle).
func (a *Arena) create(op string, newArray func() C.mlx_array) *Array {
	var res C.mlx_array
	err := check(op, func() C.int {
		res = newArray()
		if res.ctx == nil {
			return 1
		}
		return 0
	})
	if err != nil {
		a.err = err
		return &Array{}
	}
	return a.adopt(res)
}

// FromFloat32 makes a float32 array from a copy of data.
func (a *Arena) FromFloat32(data []float32, shape ...int) *Array {
	return a.FromBytes(tensor.F32, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 4*len(data)), shape...)
}

// Copied reports whether Wrap had to copy the data (see Wrap).
func (x *Array) Copied() bool { return x.copied }

// wrapped is what a wrapped buffer's release callback finds: the pin that
// keeps Go memory in place, and whether MLX has let go of the buffer.
type wrapped struct {
	pin      runtime.Pinner
	released atomic.Bool
}

// FromInt32 makes an int32 array from a copy of data.
func (a *Arena) FromInt32(data []int32, shape ...int) *Array {
	return a.FromBytes(tensor.I32, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 4*len(data)), shape...)
}

// Wrap makes an array over data without copying it where MLX's allocator
// can adopt foreign memory (a weight in a loaded or memory-mapped file),
// and as a copy otherwise; Copied tells which. MLX's CPU allocator adopts
// nothing: it copies at once and drops data. The Metal allocator adopts
// page-aligned buffers. Go memory stays pinned until MLX drops its last
// reference to the buffer, which may be after the array is freed (a
// reshape or view shares it); data must not change while MLX uses it.
func (a *Arena) Wrap(dt tensor.DType, data []byte, shape ...int) *Array {
	checkData("Wrap", dt, len(data), shape)
	if a.err != nil {
		return &Array{}
	}
	cs := cints(shape)
	w := new(wrapped)
	w.pin.Pin(&data[0])
	h := cgo.NewHandle(w)
	liveWraps.Add(1)
	x := a.create("mlx_array_new_data_managed_payload", func() C.mlx_array {
		return C.fusion_mlx_wrap(unsafe.Pointer(&data[0]), ptr(cs), C.int(len(cs)), toMLX(dt), C.uintptr_t(h))
	})
	if x.c.ctx == nil && !w.released.Load() {
		// MLX failed before taking the buffer: nothing will call back.
		w.pin.Unpin()
		h.Delete()
		liveWraps.Add(-1)
		return x
	}
	x.copied = w.released.Load()
	return x
}

// liveWraps counts the buffers Wrap has pinned that MLX still holds
// (tests check that it returns to its level).
var liveWraps atomic.Int64

//export fusionMLXRelease
func fusionMLXRelease(payload unsafe.Pointer) {
	h := cgo.Handle(*(*C.uintptr_t)(payload))
	C.free(payload)
	w := h.Value().(*wrapped)
	w.pin.Unpin()
	w.released.Store(true)
	h.Delete()
	liveWraps.Add(-1)
}

// Eval computes xs (and what they depend on) now.
func (a *Arena) Eval(xs ...*Array) error {
	if a.err != nil {
		return a.err
	}
	cs := make([]C.mlx_array, len(xs))
	for i, x := range xs {
		if x == nil || x.c.ctx == nil {
			a.err = &Error{Op: "mlx_eval", Msg: "an array is empty (freed, or from a failed op)"}
			return a.err
		}
		cs[i] = x.c
	}
	if len(cs) == 0 {
		return nil
	}
	vec := C.mlx_vector_array_new_data(&cs[0], C.size_t(len(cs)))
	defer C.mlx_vector_array_free(vec)
	if err := check("mlx_eval", func() C.int { return C.mlx_eval(vec) }); err != nil {
		a.err = err
	}
	return a.err
}

// Bytes evaluates x and returns a copy of its elements in its own type,
// row-major, little-endian.
func (a *Arena) Bytes(x *Array) ([]byte, error) {
	m := a.Mark()
	defer a.Release(m)
	flat := a.Reshape(x, x.Size())
	if x.dtype != tensor.U8 {
		flat = a.op("mlx_view", []*Array{flat}, func(res *C.mlx_array) C.int {
			return C.mlx_view(res, flat.c, C.MLX_UINT8, a.rt.stream)
		})
	}
	c := a.op("mlx_contiguous", []*Array{flat}, func(res *C.mlx_array) C.int {
		return C.mlx_contiguous(res, flat.c, false, a.rt.stream)
	})
	if err := a.Eval(c); err != nil {
		return nil, err
	}
	var p *C.uint8_t
	if err := check("mlx_array_data_uint8", func() C.int {
		p = C.mlx_array_data_uint8(c.c)
		if p == nil {
			return 1
		}
		return 0
	}); err != nil {
		return nil, err
	}
	n := int(C.mlx_array_nbytes(c.c))
	return C.GoBytes(unsafe.Pointer(p), C.int(n)), nil
}

// Float32 evaluates x and returns its elements converted to float32,
// row-major.
func (a *Arena) Float32(x *Array) ([]float32, error) {
	m := a.Mark()
	defer a.Release(m)
	f := x
	if x.dtype != tensor.F32 {
		f = a.AsType(x, tensor.F32)
	}
	b, err := a.Bytes(f)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(b)/4)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(b)), b)
	return out, nil
}
