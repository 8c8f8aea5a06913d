//go:build cgo

package mlx

/*
#include "errors.h"
*/
import "C"

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// Conv2D is x [N, H, W, C] convolved with w [Out, kh, kw, C], stride 1,
// zero padding pad on every side; mlx conv2d.
func (a *Arena) Conv2D(x, w *Array, pad int) *Array {
	return a.op("mlx_conv2d", []*Array{x, w}, func(res *C.mlx_array) C.int {
		return C.mlx_conv2d(res, x.c, w.c, 1, 1, C.int(pad), C.int(pad), 1, 1, 1, a.rt.stream)
	})
}

// Normalize is LayerNorm without affine weights: the last axis of x to
// zero mean and unit variance, (x − mean)·rsqrt(var + eps); mlx
// fast.layer_norm with no weight and no bias.
func (a *Arena) Normalize(x *Array, eps float32) *Array {
	none := C.mlx_array_new()
	return a.op("mlx_fast_layer_norm", []*Array{x}, func(res *C.mlx_array) C.int {
		return C.mlx_fast_layer_norm(res, x.c, none, none, C.float(eps), a.rt.stream)
	})
}

// Conv2D runs mlx conv2d on the image as [1, h, w, C] with the weight
// viewed as [Out, k, k, C], then adds the bias. Dense weights only (a
// quantized convolution is not an MLX op).
func (s *step) Conv2D(x backend.Array, w backend.Weight, height, width, kernel, pad int) backend.Array {
	m := wt(w)
	in := use(nd(x), m.dt)
	oh, ow, err := backend.Conv2DShape(in, w, height, width, kernel, pad)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	if m.affine || m.fp != "" {
		panic(fmt.Sprintf("mlx: Conv2D %s: quantized convolution weights are not supported", m.name))
	}
	dt := linearType(s.b.f32, in.dt, m)
	return s.record(oh*ow, m.out, dt, func(a *Arena) *Array {
		// conv2d wants one type: the product's, as Linear's matmul promotes.
		ct := promote(in.dt, m.dt)
		if s.b.f32 {
			ct = tensor.F32
		}
		img := as(a, a.Reshape(in.x, 1, height, width, in.cols), ct)
		k := as(a, a.Reshape(m.w, m.out, kernel, kernel, in.cols), ct)
		y := as(a, a.Reshape(a.Conv2D(img, k, pad), oh*ow, m.out), dt)
		if m.bias != nil {
			y = a.Add(y, as(a, m.bias, dt))
		}
		return y
	})
}

// GroupNorm is mlx nn.GroupNorm (pytorch_compatible): the image as [h·w,
// groups, C/groups], each group's values gathered into one row [groups,
// h·w·C/groups] normalized by fast.layer_norm, then back and the affine
// weights per channel.
func (s *step) GroupNorm(x backend.Array, groups int, w, bias backend.Vector, eps float32) backend.Array {
	wv, ok1 := w.(*vector)
	bv, ok2 := bias.(*vector)
	if !ok1 || !ok2 {
		panic(fmt.Sprintf("mlx: GroupNorm: vectors of another backend (%T, %T)", w, bias))
	}
	in := use(nd(x), wv.dt)
	if err := backend.GroupNormShape(in, groups, w, bias); err != nil {
		panic("mlx: " + err.Error())
	}
	rows, cols, cg := in.rows, in.cols, in.cols/groups
	dt := promote(promote(in.dt, wv.dt), bv.dt)
	return s.record(rows, cols, dt, func(a *Arena) *Array {
		g := a.Reshape(a.Transpose(a.Reshape(in.x, rows, groups, cg), 1, 0, 2), groups, rows*cg)
		n := a.Transpose(a.Reshape(a.Normalize(g, eps), groups, rows, cg), 1, 0, 2)
		y := a.Multiply(a.Reshape(n, rows, cols), wv.v)
		return a.Add(y, bv.v)
	})
}

// Upsample2x repeats each pixel along x (the image as [h·w, 1, C] joined
// with itself on axis 1), then each row of pixels along y.
func (s *step) Upsample2x(x backend.Array, height, width int) backend.Array {
	in := use(nd(x), tensor.F32)
	if err := backend.Upsample2xShape(in, height, width); err != nil {
		panic("mlx: " + err.Error())
	}
	c := in.cols
	return s.record(4*in.rows, c, in.dt, func(a *Arena) *Array {
		p := a.Reshape(in.x, in.rows, 1, c)
		wide := a.Reshape(a.Concatenate([]*Array{p, p}, 1), height, 1, 2*width*c)
		return a.Reshape(a.Concatenate([]*Array{wide, wide}, 1), 4*in.rows, c)
	})
}
