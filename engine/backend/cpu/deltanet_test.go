package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// TestCausalConv checks the depthwise convolution with state against its
// formula in float64, for two sequences (one shorter than the kernel), and
// the new states: each sequence's last kernel−1 inputs.
func TestCausalConv(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(21, 22))
	const c, kernel = 6, 4
	lens := []int{5, 2}
	x, state, w := randFloats(rng, 7*c), randFloats(rng, 2*(kernel-1)*c), randFloats(rng, c*kernel)
	var want, wantState []float64
	row := 0
	for i, n := range lens {
		in := make([][]float32, 0, kernel-1+n)
		for t := range kernel - 1 {
			in = append(in, state[(i*(kernel-1)+t)*c:(i*(kernel-1)+t+1)*c])
		}
		for t := range n {
			in = append(in, x[(row+t)*c:(row+t+1)*c])
		}
		for t := range n {
			for ch := range c {
				var s float64
				for j := range kernel {
					s += float64(w[ch*kernel+j]) * float64(in[t+j][ch])
				}
				want = append(want, s)
			}
		}
		for _, r := range in[n:] {
			for _, v := range r {
				wantState = append(wantState, float64(v))
			}
		}
		row += n
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	out, next := s.(*step).CausalConv(s.Input(7, c, x), s.Input(2, (kernel-1)*c, state), vectorOf(t, b, w), kernel, lens)
	closeTo(t, "CausalConv", read(t, s, out), want, 1e-5)
	closeTo(t, "CausalConv state", read(t, s, next), wantState, 0)
}

// TestGatedDelta checks the gated delta rule against its formula in
// float64 (mlx-lm's _gated_delta_step_ops, token by token) for two
// sequences, two key heads shared by four value heads, with a state to
// start from; and SigmoidGate, full width and one column.
func TestGatedDelta(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(23, 24))
	const hk, dk, hv, dv = 2, 8, 4, 6
	lens := []int{3, 5}
	rows := 8
	q, k, v := randFloats(rng, rows*hk*dk), randFloats(rng, rows*hk*dk), randFloats(rng, rows*hv*dv)
	a, bb := randFloats(rng, rows*hv), randFloats(rng, rows*hv)
	aLog, dt := randFloats(rng, hv), randFloats(rng, hv)
	state := randFloats(rng, 2*hv*dv*dk)
	want := make([]float64, rows*hv*dv)
	wantState := make([]float64, len(state))
	for i, x := range state {
		wantState[i] = float64(x)
	}
	row := 0
	for i, n := range lens {
		for h := range hv {
			S := wantState[(i*hv+h)*dv*dk : (i*hv+h+1)*dv*dk]
			kh := h / (hv / hk)
			for t := row; t < row+n; t++ {
				x := float64(a[t*hv+h]) + float64(dt[h])
				g := math.Exp(-math.Exp(float64(aLog[h])) * math.Log1p(math.Exp(x)))
				beta := 1 / (1 + math.Exp(-float64(bb[t*hv+h])))
				for r := range dv {
					var mem float64
					for c := range dk {
						S[r*dk+c] *= g
						mem += S[r*dk+c] * float64(k[(t*hk+kh)*dk+c])
					}
					delta := (float64(v[(t*hv+h)*dv+r]) - mem) * beta
					var y float64
					for c := range dk {
						S[r*dk+c] += float64(k[(t*hk+kh)*dk+c]) * delta
						y += S[r*dk+c] * float64(q[(t*hk+kh)*dk+c])
					}
					want[(t*hv+h)*dv+r] = y
				}
			}
		}
		row += n
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	st := s.(*step)
	y, next := st.GatedDelta(s.Input(rows, hk*dk, q), s.Input(rows, hk*dk, k), s.Input(rows, hv*dv, v),
		s.Input(rows, hv, a), s.Input(rows, hv, bb), s.Input(2, hv*dv*dk, state), vectorOf(t, b, aLog), vectorOf(t, b, dt), hk, lens)
	closeTo(t, "GatedDelta", read(t, s, y), want, 1e-4)
	closeTo(t, "GatedDelta state", read(t, s, next), wantState, 1e-4)

	x, g, g1 := randFloats(rng, 3*5), randFloats(rng, 3*5), randFloats(rng, 3)
	wantGate, wantGate1 := make([]float64, 15), make([]float64, 15)
	for i := range x {
		wantGate[i] = float64(x[i]) / (1 + math.Exp(-float64(g[i])))
		wantGate1[i] = float64(x[i]) / (1 + math.Exp(-float64(g1[i/5])))
	}
	closeTo(t, "SigmoidGate", read(t, s, st.SigmoidGate(s.Input(3, 5, x), s.Input(3, 5, g))), wantGate, 1e-6)
	closeTo(t, "SigmoidGate one column", read(t, s, st.SigmoidGate(s.Input(3, 5, x), s.Input(3, 1, g1))), wantGate1, 1e-6)
}

func vectorOf(t *testing.T, b *Backend, v []float32) backend.Vector {
	t.Helper()
	w, err := b.Vector(backend.VectorData{Name: "v", Data: f32Tensor(v)})
	if err != nil {
		t.Fatal(err)
	}
	return w
}
