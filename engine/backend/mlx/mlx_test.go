//go:build cgo

package mlx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/tensor"
)

// EnvRequire makes the MLX tests fail, not skip, when libmlxc is missing
// (make test sets it).
const EnvRequire = "FUSION_REQUIRE_MLX"

// openRuntime opens the MLX thread, or skips (fails under
// FUSION_REQUIRE_MLX=1) with the reason the library is unavailable.
func openRuntime(t *testing.T) *Runtime {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 and MLX is unavailable: %v", EnvRequire, err)
		}
		t.Skipf("MLX unavailable, skipping every MLX test (make build-mlx builds libmlxc): %v", err)
	}
	rt, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// on runs fn on the MLX thread with a fresh arena, freed afterwards. fn
// must not call t.Fatal (it runs on the MLX goroutine): it returns errors.
func on(t *testing.T, rt *Runtime, fn func(a *Arena) error) {
	t.Helper()
	err := rt.Do(context.Background(), func() error {
		a := rt.NewArena()
		defer a.Free()
		if err := fn(a); err != nil {
			return err
		}
		return a.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func randFloats(rng *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * scale)
	}
	return out
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func bf16Bytes(v []float32) []byte {
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = tensor.F32ToBF16(x)
	}
	return u16Bytes(h)
}

// within fails unless |got[i] − want[i]| ≤ tol·scale[i] for every i (scale
// nil: max(1, |want[i]|)). It returns the largest |got − want|.
func within(what string, got []float32, want, scale []float64, tol float64) (float64, error) {
	if len(got) != len(want) {
		return 0, errors.New(what + ": lengths differ")
	}
	worst := 0.0
	for i := range got {
		d := math.Abs(float64(got[i]) - want[i])
		s := max(1, math.Abs(want[i]))
		if scale != nil {
			s = scale[i]
		}
		if d > tol*s || math.IsNaN(d) {
			return d, fmt.Errorf("%s: value %d is %v, want %v (Δ %.3g > %.3g)", what, i, got[i], want[i], d, tol*s)
		}
		worst = max(worst, d)
	}
	return worst, nil
}

// cpuRun runs fn in a step of a fresh CPU backend and reads the array it
// returns.
func cpuRun(t *testing.T, opts cpu.Options, fn func(b *cpu.Backend, s backend.Step) backend.Array) []float32 {
	t.Helper()
	b := cpu.New(opts)
	defer b.Close()
	s := b.NewStep(context.Background())
	defer s.Close()
	out, err := s.Read(fn(b, s))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// TestMLX holds every test that needs libmlxc, so that a machine without
// it prints one skip line.
func TestMLX(t *testing.T) {
	rt := openRuntime(t)
	t.Run("Library", func(t *testing.T) { testLibrary(t) })
	t.Run("DeclarationsMatchHeaders", func(t *testing.T) { testDeclarationsMatchHeaders(t) })
	t.Run("ArraysRoundTrip", func(t *testing.T) { testArraysRoundTrip(t, rt) })
	t.Run("Wrap", func(t *testing.T) { testWrap(t, rt) })
	t.Run("Matmul", func(t *testing.T) { testMatmul(t, rt) })
	t.Run("QuantizedMatmul", func(t *testing.T) { testQuantizedMatmul(t, rt) })
	t.Run("GGUFAffine", func(t *testing.T) { testGGUFAffine(t, rt) })
	t.Run("RMSNorm", func(t *testing.T) { testRMSNorm(t, rt) })
	t.Run("RoPE", func(t *testing.T) { testRoPE(t, rt) })
	t.Run("Attention", func(t *testing.T) { testAttention(t, rt) })
	t.Run("Softmax", func(t *testing.T) { testSoftmax(t, rt) })
	t.Run("ErrorIsGoError", func(t *testing.T) { testErrorIsGoError(t, rt) })
	t.Run("Memory", func(t *testing.T) { testMemory(t, rt) })
	t.Run("Do", func(t *testing.T) { testDo(t, rt) })
	t.Run("OpenRejects", func(t *testing.T) { testOpenRejects(t) })
	t.Run("EncoderOps", testEncoderOps)
	t.Run("ExpertOps", testExpertOps)
	t.Run("HeadOps", testHeadOps)
	t.Run("FPLinear", testFPLinear)
	t.Run("GemmaOps", testGemmaOps)
	t.Run("SharedKV", testSharedKV)
	t.Run("KVWidths", testKVWidths)
	t.Run("FluxOps", testFluxOps)
	t.Run("VITSOps", testVITSOps)
	t.Run("ImageOps", testImageOps)
	t.Run("RNNOps", testRNNOps)
	t.Run("DeltaNetOps", testDeltaNetOps)
	t.Run("Backend", testBackend)
}

func testLibrary(t *testing.T) {
	path, version := Library()
	if !strings.HasPrefix(version, SupportedVersion) {
		t.Errorf("version %q, want %sx", version, SupportedVersion)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("library path %q: %v", path, err)
	}
	t.Logf("libmlxc %s (MLX %s)", path, version)
}

// testDeclarationsMatchHeaders compiles our declarations against the real
// mlx-c headers installed beside the loaded library: a parameter or
// return type, an enum value or a struct layout that differs fails.
func testDeclarationsMatchHeaders(t *testing.T) {
	path, _ := Library()
	include := filepath.Join(filepath.Dir(filepath.Dir(path)), "include")
	if _, err := os.Stat(filepath.Join(include, "mlx", "c", "mlx.h")); err != nil {
		t.Fatalf("no mlx-c headers beside %s: %v", path, err)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("no C compiler: %v", err)
	}
	d := parseDecls(t)
	src := filepath.Join(t.TempDir(), "check.c")
	if err := os.WriteFile(src, []byte(d.Check()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cc, "-std=c11", "-fsyntax-only", "-Werror", "-Wall", "-I", include, src).CombinedOutput()
	if err != nil {
		t.Fatalf("our declarations do not match mlx-c's headers: %v\n%s", err, out)
	}
	// The check must be able to fail: one wrong parameter type.
	bad := strings.Replace(d.Check(), "(*fusion_check_mlx_matmul)(mlx_array* res, const mlx_array a", "(*fusion_check_mlx_matmul)(mlx_array* res, const mlx_stream a", 1)
	if bad == d.Check() {
		t.Fatal("the check file has no mlx_matmul line to break")
	}
	if err := os.WriteFile(src, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=c11", "-fsyntax-only", "-Werror", "-Wall", "-I", include, src).CombinedOutput(); err == nil {
		t.Fatalf("a wrong declaration compiled:\n%s", out)
	}
}

func testArraysRoundTrip(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := randFloats(rng, 1000, 3)
	// Values halfway between two bf16 / f16 numbers check the rounding.
	vals = append(vals, math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), 65504, 1e-6, -0.0)
	on(t, rt, func(a *Arena) error {
		x := a.FromFloat32(vals, 5, len(vals)/5)
		if s := x.Shape(); len(s) != 2 || s[0] != 5 || s[1] != len(vals)/5 || x.DType() != tensor.F32 {
			return fmt.Errorf("shape %v type %v", s, x.DType())
		}
		got, err := a.Float32(x)
		if err != nil {
			return err
		}
		for i := range vals {
			if math.Float32bits(got[i]) != math.Float32bits(vals[i]) {
				return fmt.Errorf("f32 value %d: %v, want %v", i, got[i], vals[i])
			}
		}
		for _, c := range []struct {
			dt     tensor.DType
			to     func(float32) uint16
			widen_ func(uint16) float32
		}{
			{tensor.BF16, tensor.F32ToBF16, tensor.BF16ToF32},
			{tensor.F16, tensor.F32ToF16, tensor.F16ToF32},
		} {
			// MLX's f32 → half conversion rounds as ours does.
			h, err := a.Bytes(a.AsType(x, c.dt))
			if err != nil {
				return err
			}
			want := make([]uint16, len(vals))
			for i, v := range vals {
				want[i] = c.to(v)
			}
			for i := range want {
				if g := binary.LittleEndian.Uint16(h[2*i:]); g != want[i] {
					return fmt.Errorf("%v of %v: %#04x, want %#04x", c.dt, vals[i], g, want[i])
				}
			}
			// Half arrays from Go bytes, back to bytes and to f32.
			src := u16Bytes(want)
			y := a.FromBytes(c.dt, src, len(want))
			back, err := a.Bytes(y)
			if err != nil {
				return err
			}
			if string(back) != string(src) {
				return fmt.Errorf("%v bytes changed on the round trip", c.dt)
			}
			f, err := a.Float32(y)
			if err != nil {
				return err
			}
			for i := range want {
				if f[i] != c.widen_(want[i]) {
					return fmt.Errorf("%v %#04x widened to %v, want %v", c.dt, want[i], f[i], c.widen_(want[i]))
				}
			}
		}
		return nil
	})
}

// testWrap: MLX's CPU allocator cannot adopt foreign memory, so Wrap
// copies at once and releases the Go buffer (a change made afterwards does
// not show); on Metal a page-aligned buffer is used in place (a change made
// before evaluation shows). Either way the pin is released when MLX lets
// go.
func testWrap(t *testing.T, rt *Runtime) {
	page := os.Getpagesize()
	raw := make([]byte, 2*page)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) % uintptr(page)); r != 0 {
		off = page - r
	}
	buf := raw[off : off+page]
	vals := make([]float32, page/4)
	for i := range vals {
		vals[i] = float32(i)
	}
	copy(buf, f32Bytes(vals))
	before := liveWraps.Load()
	on(t, rt, func(a *Arena) error {
		x := a.Wrap(tensor.F32, buf, len(vals))
		binary.LittleEndian.PutUint32(buf[4*4:], math.Float32bits(50))
		got, err := a.Float32(a.Add(x, x))
		if err != nil {
			return err
		}
		want4 := float32(8)
		if rt.GPU() {
			want4 = 100
			if x.Copied() {
				return fmt.Errorf("Metal copied a page-aligned buffer")
			}
		} else if !x.Copied() || liveWraps.Load() != before {
			return fmt.Errorf("CPU allocator: copied %v, live wraps %d (want true, %d)", x.Copied(), liveWraps.Load(), before)
		}
		if got[4] != want4 || got[5] != 10 {
			return fmt.Errorf("values 4, 5 = %v, %v, want %v, 10 (GPU %v, copied %v)", got[4], got[5], want4, rt.GPU(), x.Copied())
		}
		return nil
	})
	if n := liveWraps.Load(); n != before {
		t.Errorf("%d wrapped buffers still pinned after the arena was freed, want %d", n, before)
	}
}

// linearWant is x·Wᵀ in float64 over the rows of w, and Σ|x_i·w_i| per
// output (the scale of float32 accumulation error).
func linearWant(x, w []float32, rows, in, out int) (want, mag []float64) {
	want, mag = make([]float64, rows*out), make([]float64, rows*out)
	for r := range rows {
		for o := range out {
			var acc, m float64
			for i := range in {
				p := float64(x[r*in+i]) * float64(w[o*in+i])
				acc += p
				m += math.Abs(p)
			}
			want[r*out+o], mag[r*out+o] = acc, m
		}
	}
	return want, mag
}

func testMatmul(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, in, out = 7, 96, 40
	x, wv := randFloats(rng, rows*in, 1), randFloats(rng, out*in, 0.2)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		t.Run(dt.String(), func(t *testing.T) {
			var wb []byte
			switch dt {
			case tensor.F32:
				wb = f32Bytes(wv)
			case tensor.BF16:
				wb = bf16Bytes(wv)
			case tensor.F16:
				h := make([]uint16, len(wv))
				for i, v := range wv {
					h[i] = tensor.F32ToF16(v)
				}
				wb = u16Bytes(h)
			}
			// The CPU backend's Linear on the same stored weight.
			want32 := cpuRun(t, cpu.Options{}, func(b *cpu.Backend, s backend.Step) backend.Array {
				w, err := b.Weight(backend.WeightData{Name: "w", Format: backend.Dense, Out: out, In: in,
					Data: tensor.Tensor{DType: dt, Shape: []int64{out, in}, Data: wb}})
				if err != nil {
					t.Fatal(err)
				}
				return s.Linear(s.Input(rows, in, x), w)
			})
			stored := cpuRun(t, cpu.Options{}, func(b *cpu.Backend, s backend.Step) backend.Array {
				w, _ := b.Weight(backend.WeightData{Name: "w", Format: backend.Dense, Out: out, In: in,
					Data: tensor.Tensor{DType: dt, Shape: []int64{out, in}, Data: wb}})
				ids := make([]int32, out)
				for i := range ids {
					ids[i] = int32(i)
				}
				return s.Embed(w, ids)
			})
			want, mag := linearWant(x, stored, rows, in, out)
			on(t, rt, func(a *Arena) error {
				w := a.Wrap(dt, wb, out, in)
				got, err := a.Float32(a.Matmul(a.FromFloat32(x, rows, in), a.Transpose(w, 1, 0)))
				if err != nil {
					return err
				}
				if _, err := within("MLX vs float64", got, want, mag, 1e-6); err != nil {
					return err
				}
				d, err := within("MLX vs CPU backend", got, widen(want32), mag, 1e-6)
				t.Logf("%v: max |MLX − CPU| %.3g", dt, d)
				return err
			})
		})
	}
}

func testQuantizedMatmul(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, in, out = 5, 256, 24
	for _, c := range []struct{ bits, group int }{{4, 64}, {8, 64}, {4, 32}, {8, 128}, {2, 64}, {3, 64}, {5, 32}, {6, 128}} {
		t.Run(fmt.Sprintf("%dbit-g%d", c.bits, c.group), func(t *testing.T) {
			words := make([]byte, out*in*c.bits/8)
			for i := range words {
				words[i] = byte(rng.Uint32())
			}
			groups := out * in / c.group
			scales, biases := make([]float32, groups), make([]float32, groups)
			for i := range scales {
				scales[i] = float32(rng.NormFloat64() * 0.02)
				biases[i] = float32(rng.NormFloat64() * 0.1)
			}
			sb, bb := bf16Bytes(scales), bf16Bytes(biases)
			x := randFloats(rng, rows*in, 1)
			wd := backend.WeightData{Name: "q", Format: backend.MLXAffine, Out: out, In: in, Bits: c.bits, Group: c.group,
				Data:   tensor.Tensor{DType: tensor.U32, Shape: []int64{out, int64(in * c.bits / 32)}, Data: words},
				Scales: tensor.Tensor{DType: tensor.BF16, Shape: []int64{out, int64(in / c.group)}, Data: sb},
				Biases: tensor.Tensor{DType: tensor.BF16, Shape: []int64{out, int64(in / c.group)}, Data: bb}}
			want32 := cpuRun(t, cpu.Options{}, func(b *cpu.Backend, s backend.Step) backend.Array {
				w, err := b.Weight(wd)
				if err != nil {
					t.Fatal(err)
				}
				return s.Linear(s.Input(rows, in, x), w)
			})
			deq := cpuRun(t, cpu.Options{}, func(b *cpu.Backend, s backend.Step) backend.Array {
				w, _ := b.Weight(wd)
				ids := make([]int32, out)
				for i := range ids {
					ids[i] = int32(i)
				}
				return s.Embed(w, ids)
			})
			want, mag := linearWant(x, deq, rows, in, out)
			on(t, rt, func(a *Arena) error {
				w := a.Wrap(tensor.U32, words, out, in*c.bits/32)
				s := a.Wrap(tensor.BF16, sb, out, in/c.group)
				b := a.Wrap(tensor.BF16, bb, out, in/c.group)
				y := a.QuantizedMatmul(a.FromFloat32(x, rows, in), w, s, b, true, c.group, c.bits)
				if sh := y.Shape(); len(sh) != 2 || sh[0] != rows || sh[1] != out {
					return fmt.Errorf("shape %v, want [%d %d]", sh, rows, out)
				}
				got, err := a.Float32(y)
				if err != nil {
					return err
				}
				if _, err := within("MLX vs float64 over the CPU backend's dequantized rows", got, want, mag, 1e-6); err != nil {
					return err
				}
				d, err := within("MLX vs CPU backend", got, widen(want32), mag, 1e-6)
				t.Logf("max |MLX − CPU| %.3g (output %v)", d, y.DType())
				return err
			})
		})
	}
}

func testRMSNorm(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 6, 64
	for _, group := range []int{64, 16} { // a layer norm; Qwen3's per-head norm
		x, wv := randFloats(rng, rows*cols, 2), randFloats(rng, group, 1)
		want := cpuRun(t, cpu.Options{}, func(b *cpu.Backend, s backend.Step) backend.Array {
			w, err := b.Vector(backend.VectorData{Name: "n", Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(group)}, Data: f32Bytes(wv)}})
			if err != nil {
				t.Fatal(err)
			}
			return s.RMSNorm(s.Input(rows, cols, x), w, 1e-6)
		})
		on(t, rt, func(a *Arena) error {
			xs := a.Reshape(a.FromFloat32(x, rows, cols), rows, cols/group, group)
			got, err := a.Float32(a.RMSNorm(xs, a.FromFloat32(wv, group), 1e-6))
			if err != nil {
				return err
			}
			d, err := within(fmt.Sprintf("RMSNorm over %d", group), got, widen(want), nil, 1e-5)
			t.Logf("groups of %d: max |MLX − CPU| %.3g", group, d)
			return err
		})
	}
	// bf16 activations with a float32 weight come out float32 (mlx-lm's
	// promotion), the normalization done in float32 first.
	on(t, rt, func(a *Arena) error {
		y := a.RMSNorm(a.AsType(a.FromFloat32(randFloats(rng, 64, 1), 1, 64), tensor.BF16), a.FromFloat32(randFloats(rng, 64, 1), 64), 1e-5)
		if y.DType() != tensor.F32 {
			return fmt.Errorf("bf16 x, f32 weight: output %v, want F32", y.DType())
		}
		return nil
	})
}

func testRoPE(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(9, 10))
	const heads, hd, L, offset = 3, 16, 5, 37
	periods := make([]float32, 6)
	for i := range periods {
		periods[i] = float32(math.Pow(500, float64(i)/6)) * 1.5
	}
	for _, c := range []struct {
		name string
		r    backend.RoPE
	}{
		{"default", backend.RoPE{HeadDim: hd, Dims: hd, Base: 10000}},
		{"traditional", backend.RoPE{HeadDim: hd, Dims: hd, Base: 10000, Traditional: true}},
		{"partial+scale", backend.RoPE{HeadDim: hd, Dims: 12, Base: 500, Scale: 0.25}},
		{"freqs", backend.RoPE{HeadDim: hd, Dims: 12, Freqs: periods}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := randFloats(rng, L*heads*hd, 1)
			batch := &backend.Batch{Seqs: []backend.Seq{{Offset: offset, Len: L}}}
			want := cpuRun(t, cpu.Options{}, func(b *cpu.Backend, s backend.Step) backend.Array {
				return s.RoPE(s.Input(L, heads*hd, x), &c.r, batch)
			})
			scale := c.r.Scale
			if scale == 0 {
				scale = 1
			}
			on(t, rt, func(a *Arena) error {
				// [L, heads·hd] → [1, heads, L, hd]: the sequence at axis −2.
				xs := a.Transpose(a.Reshape(a.FromFloat32(x, L, heads*hd), 1, L, heads, hd), 0, 2, 1, 3)
				var freqs *Array
				if c.r.Freqs != nil {
					freqs = a.FromFloat32(c.r.Freqs, len(c.r.Freqs))
				}
				y := a.RoPE(xs, c.r.Dims, c.r.Traditional, float32(c.r.Base), scale, offset, freqs)
				got, err := a.Float32(a.Reshape(a.Transpose(y, 0, 2, 1, 3), L, heads*hd))
				if err != nil {
					return err
				}
				d, err := within("RoPE", got, widen(want), nil, 2e-5)
				t.Logf("max |MLX − CPU| %.3g", d)
				return err
			})
		})
	}
}

// attentionWant is causal (or full) attention in float64: q [heads, qL,
// hd], k and v [kvh, kL, hd], query i seeing keys j ≤ i + kL − qL.
func attentionWant(q, k, v []float32, heads, kvh, qL, kL, hd int, scale float64, causal bool) []float64 {
	out := make([]float64, heads*qL*hd)
	for h := range heads {
		g := h / (heads / kvh)
		for i := range qL {
			visible := kL
			if causal {
				visible = i + kL - qL + 1
			}
			s := make([]float64, visible)
			m := math.Inf(-1)
			for j := range s {
				for e := range hd {
					s[j] += float64(q[(h*qL+i)*hd+e]) * float64(k[(g*kL+j)*hd+e])
				}
				s[j] *= scale
				m = max(m, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			for j := range s {
				for e := range hd {
					out[(h*qL+i)*hd+e] += s[j] / sum * float64(v[(g*kL+j)*hd+e])
				}
			}
		}
	}
	return out
}

func testAttention(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		name                   string
		heads, kvh, qL, kL, hd int
		causal                 bool
	}{
		{"gqa-causal-prefill", 4, 2, 9, 9, 32, true},
		{"gqa-causal-after-cache", 6, 2, 3, 40, 16, true},
		{"mha-decode", 2, 2, 1, 70, 64, true},
		{"gqa-full", 4, 1, 5, 12, 8, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := randFloats(rng, c.heads*c.qL*c.hd, 1)
			k := randFloats(rng, c.kvh*c.kL*c.hd, 1)
			v := randFloats(rng, c.kvh*c.kL*c.hd, 1)
			scale := 1 / math.Sqrt(float64(c.hd))
			want := attentionWant(q, k, v, c.heads, c.kvh, c.qL, c.kL, c.hd, scale, c.causal)
			on(t, rt, func(a *Arena) error {
				y := a.Attention(a.FromFloat32(q, 1, c.heads, c.qL, c.hd), a.FromFloat32(k, 1, c.kvh, c.kL, c.hd),
					a.FromFloat32(v, 1, c.kvh, c.kL, c.hd), float32(scale), c.causal)
				got, err := a.Float32(y)
				if err != nil {
					return err
				}
				d, err := within("attention", got, want, nil, 1e-5)
				t.Logf("max |MLX − float64| %.3g", d)
				return err
			})
		})
	}
}

func testSoftmax(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(13, 14))
	const rows, cols = 4, 33
	x := randFloats(rng, rows*cols, 5)
	x[3] = 80 // a large logit: the max is subtracted
	want := make([]float64, len(x))
	for r := range rows {
		m := math.Inf(-1)
		for _, v := range x[r*cols : (r+1)*cols] {
			m = max(m, float64(v))
		}
		var sum float64
		for i := range cols {
			want[r*cols+i] = math.Exp(float64(x[r*cols+i]) - m)
			sum += want[r*cols+i]
		}
		for i := range cols {
			want[r*cols+i] /= sum
		}
	}
	on(t, rt, func(a *Arena) error {
		got, err := a.Float32(a.Softmax(a.FromFloat32(x, rows, cols), -1))
		if err != nil {
			return err
		}
		_, err = within("softmax", got, want, nil, 1e-6)
		return err
	})
}

// testErrorIsGoError: a failing op returns an *Error naming the mlx-c
// function with MLX's message; the process lives, the arena's later ops
// are no-ops, and a new arena works.
func testErrorIsGoError(t *testing.T, rt *Runtime) {
	err := rt.Do(context.Background(), func() error {
		a := rt.NewArena()
		defer a.Free()
		x := a.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		y := a.Reshape(x, 4, 4)
		if y.Size() != 0 || len(y.Shape()) != 0 {
			return fmt.Errorf("the failed reshape returned an array of shape %v", y.Shape())
		}
		z := a.Add(x, x) // skipped: the arena has failed
		if z.Size() != 0 {
			return fmt.Errorf("an op after the failure ran")
		}
		if _, rerr := a.Float32(x); rerr != a.Err() {
			return fmt.Errorf("Float32 after the failure returned %v, want the first error", rerr)
		}
		return a.Err()
	})
	var me *Error
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T), want *mlx.Error", err, err)
	}
	if me.Op != "mlx_reshape" || !strings.Contains(me.Msg, "Cannot reshape array of size 6 into shape (4,4)") {
		t.Errorf("error op %q msg %q", me.Op, me.Msg)
	}
	t.Logf("%v", err)
	on(t, rt, func(a *Arena) error {
		got, err := a.Float32(a.Reshape(a.FromFloat32([]float32{1, 2, 3, 4}, 4), 2, 2))
		if err == nil && (len(got) != 4 || got[3] != 4) {
			return fmt.Errorf("after an error: %v", got)
		}
		return err
	})
}

func testMemory(t *testing.T, rt *Runtime) {
	ctx := context.Background()
	if err := rt.ClearCache(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rt.ResetPeak(ctx); err != nil {
		t.Fatal(err)
	}
	m0, err := rt.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 20 // 4 MiB of float32
	a := rt.NewArena()
	var x *Array
	if err := rt.Do(ctx, func() error {
		x = a.FromFloat32(make([]float32, n), n)
		y := a.Add(x, x)
		return a.Eval(y)
	}); err != nil {
		t.Fatal(err)
	}
	m1, err := rt.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m1.Active-m0.Active < 2*4*n {
		t.Errorf("active memory grew by %d bytes for two arrays of %d", m1.Active-m0.Active, 4*n)
	}
	if m1.Peak < m1.Active {
		t.Errorf("peak %d < active %d", m1.Peak, m1.Active)
	}
	if err := rt.Do(ctx, func() error { a.Free(); return nil }); err != nil {
		t.Fatal(err)
	}
	m2, err := rt.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Active != m0.Active {
		t.Errorf("active memory %d after freeing the arena, was %d before", m2.Active, m0.Active)
	}
	// Metal keeps freed buffers for reuse; MLX's CPU allocator keeps none
	// (its cache counter stays 0 and it ignores a cache limit).
	if wantCache := rt.GPU(); (m2.Cache >= 4*n) != wantCache || m2.Peak < m1.Active {
		t.Errorf("after free: cache %d (GPU %v), peak %d (want ≥ %d)", m2.Cache, rt.GPU(), m2.Peak, m1.Active)
	}
	if err := rt.ClearCache(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rt.ResetPeak(ctx); err != nil {
		t.Fatal(err)
	}
	m3, err := rt.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m3.Cache != 0 || m3.Peak != m3.Active {
		t.Errorf("after ClearCache and ResetPeak: %+v", m3)
	}
	t.Logf("before %+v, with 8 MiB live %+v, freed %+v, cleared %+v", m0, m1, m2, m3)

	prevMem, err := rt.SetMemoryLimit(ctx, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if mem, err := rt.SetMemoryLimit(ctx, prevMem); err != nil || mem != 1<<30 {
		t.Errorf("SetMemoryLimit returned the previous limit %d (%v), want %d", mem, err, 1<<30)
	}
	prevCache, err := rt.SetCacheLimit(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	wantCache := int64(0)
	if rt.GPU() {
		wantCache = 1 << 20
	}
	if cache, err := rt.SetCacheLimit(ctx, prevCache); err != nil || cache != wantCache {
		t.Errorf("SetCacheLimit returned the previous limit %d (%v), want %d", cache, err, wantCache)
	}
	if _, err := rt.SetMemoryLimit(ctx, -1); err == nil {
		t.Error("a negative limit was accepted")
	}
}

func testDo(t *testing.T, rt *Runtime) {
	ctx := context.Background()
	t.Run("panic re-raised on the caller", func(t *testing.T) {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want boom", p)
			}
		}()
		rt.Do(ctx, func() error { panic("boom") })
		t.Error("Do returned")
	})
	t.Run("op outside Do panics", func(t *testing.T) {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprintf("%v", p), "outside Runtime.Do") {
				t.Errorf("recovered %v", p)
			}
		}()
		rt.NewArena().FromFloat32([]float32{1}, 1)
	})
	t.Run("cancelled while queued", func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error)
		go func() {
			done <- rt.Do(ctx, func() error { close(started); <-release; return nil })
		}()
		<-started
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		ran := false
		err := rt.Do(cctx, func() error { ran = true; return nil })
		close(release)
		if !errors.Is(err, context.DeadlineExceeded) || ran {
			t.Errorf("Do while the thread was busy: %v, ran %v", err, ran)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	t.Run("Goexit and Close", func(t *testing.T) {
		r2, err := Open()
		if err != nil {
			t.Fatal(err)
		}
		if err := r2.Do(ctx, func() error { return errors.New("mine") }); err == nil || err.Error() != "mine" {
			t.Errorf("fn's error: %v", err)
		}
		if err := r2.Do(ctx, func() error { runtime.Goexit(); return nil }); !errors.Is(err, errGoexit) {
			t.Errorf("after Goexit: %v", err)
		}
		if err := r2.Do(ctx, func() error { return nil }); !errors.Is(err, ErrClosed) {
			t.Errorf("after the thread died: %v", err)
		}
		r2.Close()
		if err := r2.Do(ctx, func() error { return nil }); !errors.Is(err, ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
	})
}

// testOpenRejects: a file that is not a library, and a library that is
// not mlx-c, are refused with the reason.
func testOpenRejects(t *testing.T) {
	notLib := filepath.Join(t.TempDir(), LibraryName())
	if err := os.WriteFile(notLib, []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := open(notLib); err == nil || !strings.Contains(err.Error(), "dlopen") {
		t.Errorf("a text file: %v", err)
	}
	path, _ := Library()
	libmlx := filepath.Join(filepath.Dir(filepath.Dir(path)), "mlx", "lib", "libmlx.so")
	if _, err := os.Stat(libmlx); err != nil {
		t.Skipf("no libmlx.so beside the library (%v)", err)
	}
	if _, err := open(libmlx); err == nil || !strings.Contains(err.Error(), "has no mlx_set_error_handler") {
		t.Errorf("libmlx.so (no C API): %v", err)
	}
}
