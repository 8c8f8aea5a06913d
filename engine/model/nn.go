package model

import "fusion/engine/backend"

// block is one transformer layer of an architecture.
type block interface {
	forward(f *frame, x backend.Array) backend.Array
}

// frame is what a block runs with: the step's ops, the batch, its layer
// number and the model's constants.
type frame struct {
	backend.Step
	batch *backend.Batch
	layer int
	eps   float32
	rope  *backend.RoPE
	scale float32 // attention scale, head_dim^−½ unless the family says
	// window > 0 makes the layer attend to its last window positions.
	window int
	// padded, when not nil, makes the batch one right-padded sequence
	// whose padding rows attend to its real positions only (see
	// Model.PaddedStates).
	padded *padding
	// perLayer are Gemma 4's per-layer inputs of the batch's rows,
	// [rows, layers·width] for the layers from perLayerFirst on (nil for
	// other families).
	perLayer      backend.Array
	perLayerFirst int
	// rec holds the batch's recurrent states (nil for models without
	// recurrent layers).
	rec *recStep
	// kvSlot maps an attention layer to its KV cache layer (set with rec).
	kvSlot func(l int) int
	// err is the first failure of an op that reads values back (a
	// router's scores); Forward stops at it.
	err error
}

// norm is RMSNorm with the model's epsilon; a weight of head_dim entries
// normalizes each head.
func (f *frame) norm(x backend.Array, w backend.Vector) backend.Array {
	return f.RMSNorm(x, w, f.eps)
}

// rotate applies the model's RoPE at each row's position.
func (f *frame) rotate(x backend.Array) backend.Array { return f.RoPE(x, f.rope, f.batch) }

// attend is causal grouped-query attention over the layer's KV cache.
func (f *frame) attend(q, k, v backend.Array) backend.Array {
	if f.padded != nil {
		return f.attendPadded(q, k, v)
	}
	if f.window > 0 {
		return f.WindowAttention(f.layer, q, k, v, f.scale, f.window, f.batch)
	}
	return f.Attention(f.layer, q, k, v, f.scale, f.batch)
}

// ffn is a block's feed-forward part: a dense MLP or a mixture of
// experts.
type ffn interface {
	forward(f *frame, x backend.Array) backend.Array
}

// mlp is the SwiGLU feed-forward block: down(silu(gate(x)) · up(x)).
type mlp struct{ gate, up, down backend.Weight }

func (m *mlp) forward(f *frame, x backend.Array) backend.Array {
	return f.Linear(f.SwiGLU(f.Linear(x, m.gate), f.Linear(x, m.up)), m.down)
}

func loadMLP(w *loader, prefix string) mlp {
	return mlp{
		gate: w.linear(prefix + "mlp.gate_proj"),
		up:   w.linear(prefix + "mlp.up_proj"),
		down: w.linear(prefix + "mlp.down_proj"),
	}
}
