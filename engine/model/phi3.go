package model

import (
	"fmt"

	"fusion/engine/backend"
)

// Phi-3 (Phi-3, Phi-3.5, Phi-4-mini; mlx-lm's phi3): Llama's block with
// the q, k and v projections fused into one qkv_proj [q | k | v] and the
// MLP's gate and up into one gate_up_proj [gate | up]; head_dim is
// hidden/heads, RoPE may rotate only the first partial_rotary_factor of
// each head, and longrope scales its frequencies (rope.go).
//
//	q, k, v = split(qkv(n)),  h = x + o(attention(rope(q), rope(k), v))
//	gate, up = split(gate_up(m)),  out = h + down(silu(gate)·up)
//
// The fused matrices are split into row ranges as they load (views of
// the file's bytes, quantized or not: each output row is its own dot
// product), so the block runs on Llama's ops and weights.
func loadPhi3(w *loader, prefix string) block {
	d := w.dims
	qkv := w.split(prefix+"self_attn.qkv_proj", d.hidden, d.heads*d.headDim, d.kvHeads*d.headDim, d.kvHeads*d.headDim)
	gateUp := w.split(prefix+"mlp.gate_up_proj", d.hidden, d.intermediate, d.intermediate)
	b := &llamaBlock{
		inputNorm: w.vector(prefix + "input_layernorm.weight"),
		postNorm:  w.vector(prefix + "post_attention_layernorm.weight"),
		attnProj:  attnProj{o: w.linear(prefix + "self_attn.o_proj")},
		mlp:       mlp{down: w.linear(prefix + "mlp.down_proj")},
	}
	if qkv != nil && gateUp != nil {
		b.q, b.k, b.v = qkv[0], qkv[1], qkv[2]
		b.mlp.gate, b.mlp.up = gateUp[0], gateUp[1]
	}
	return b
}

// split loads the fused matrix at path, [Σ outs, in], as one weight per
// consecutive range of outs rows.
func (l *loader) split(path string, in int, outs ...int) []backend.Weight {
	d, ok := l.data(path)
	if !ok {
		return nil
	}
	total := 0
	for _, n := range outs {
		total += n
	}
	if d.Out != total || d.In != in {
		l.fail(fmt.Errorf("%w: %s is [%d, %d], the config says [%d, %d]", ErrBadWeights, d.Name, d.Out, d.In, total, in))
		return nil
	}
	ws := make([]backend.Weight, len(outs))
	row := 0
	for i, n := range outs {
		part, err := backend.RowRange(d, row, row+n)
		if err != nil {
			l.fail(fmt.Errorf("%w: %w", ErrBadWeights, err))
			return nil
		}
		if ws[i] = l.upload(part, n, in); ws[i] == nil {
			return nil
		}
		row += n
	}
	return ws
}
