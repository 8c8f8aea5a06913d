package layersplit

import (
	"fmt"
	"math"
	"testing"

	"fusion/engine/modelfile"
)

// tensorRow is one tensor of a model shape's table: its bytes and the
// layer it is in (-1: outside the layers), and for the tensors outside
// the layers whether the first or the last stage loads it.
type tensorRow struct {
	name        string
	bytes       int64
	layer       int
	first, last bool
}

// shape is a real model's sizes at bf16, written out as the tensor table
// of its mlx-lm checkpoint (names as mlx-lm stores them, stacked experts).
type shape struct {
	layers, hidden, vocab int
	tied                  bool
	attn                  map[string][2]int // per layer: name → [out, in]; [n, 0] is a vector of n
	dense                 map[string][2]int // the MLP of a dense layer
	sparse                map[string][3]int // a sparse layer's tensors: [experts or 1, out, in]
	denseLayers           int               // the first layers that are dense (DeepSeek's first_k_dense_replace)
	extraLayers           int               // layers past num_hidden_layers the text model does not load (DeepSeek's MTP)
	experts, topK         int
}

func (s shape) table() []tensorRow {
	var rows []tensorRow
	add := func(name string, layer int, n int64) {
		rows = append(rows, tensorRow{name: name, bytes: 2 * n, layer: layer})
	}
	for l := range s.layers + s.extraLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		for name, d := range s.attn {
			add(p+name, l, int64(d[0])*int64(max(d[1], 1)))
		}
		add(p+"input_layernorm.weight", l, int64(s.hidden))
		add(p+"post_attention_layernorm.weight", l, int64(s.hidden))
		if l < s.denseLayers || s.sparse == nil {
			for name, d := range s.dense {
				add(p+name, l, int64(d[0])*int64(d[1]))
			}
			continue
		}
		for name, d := range s.sparse {
			add(p+name, l, int64(d[0])*int64(d[1])*int64(max(d[2], 1)))
		}
	}
	embed := int64(s.vocab) * int64(s.hidden) * 2
	rows = append(rows, tensorRow{name: "model.embed_tokens.weight", bytes: embed, layer: -1, first: true, last: s.tied},
		tensorRow{name: "model.norm.weight", bytes: 2 * int64(s.hidden), layer: -1, last: true})
	if !s.tied {
		rows = append(rows, tensorRow{name: "lm_head.weight", bytes: embed, layer: -1, last: true})
	}
	return rows
}

// loads is what the stage of layers [a, b) of a model of L layers loads
// of rows.
func loads(rows []tensorRow, a, b, L int) int64 {
	var n int64
	for _, r := range rows {
		if r.layer >= a && r.layer < b || r.layer < 0 && (r.first && a == 0 || r.last && b == L) {
			n += r.bytes
		}
	}
	return n
}

var (
	qwen3Attn = func(q, kv, hidden, headDim int) map[string][2]int {
		return map[string][2]int{
			"self_attn.q_proj.weight": {q, hidden}, "self_attn.k_proj.weight": {kv, hidden},
			"self_attn.v_proj.weight": {kv, hidden}, "self_attn.o_proj.weight": {hidden, q},
			"self_attn.q_norm.weight": {headDim, 0}, "self_attn.k_norm.weight": {headDim, 0},
		}
	}
	mlp = func(hidden, inter int) map[string][2]int {
		return map[string][2]int{"mlp.gate_proj.weight": {inter, hidden}, "mlp.up_proj.weight": {inter, hidden}, "mlp.down_proj.weight": {hidden, inter}}
	}
	// Qwen3-30B-A3B: 48 layers, each of 128 experts of 768 (8 per token).
	qwen3MoE = shape{layers: 48, hidden: 2048, vocab: 151936, attn: qwen3Attn(4096, 512, 2048, 128), experts: 128, topK: 8,
		sparse: map[string][3]int{
			"mlp.gate.weight":                 {1, 128, 2048},
			"mlp.switch_mlp.gate_proj.weight": {128, 768, 2048},
			"mlp.switch_mlp.up_proj.weight":   {128, 768, 2048},
			"mlp.switch_mlp.down_proj.weight": {128, 2048, 768},
		}}
	// DeepSeek-V3: latent attention, 3 dense layers of 18,432, then 58 of
	// 256 routed experts of 2,048 (8 per token) and one shared expert; a
	// 62nd layer (multi-token prediction) the text model does not load.
	deepseekV3 = shape{layers: 61, hidden: 7168, vocab: 129280, denseLayers: 3, extraLayers: 1, experts: 256, topK: 8,
		attn: map[string][2]int{
			"self_attn.q_a_proj.weight": {1536, 7168}, "self_attn.q_a_layernorm.weight": {1536, 0},
			"self_attn.q_b_proj.weight": {128 * 192, 1536}, "self_attn.kv_a_proj_with_mqa.weight": {576, 7168},
			"self_attn.kv_a_layernorm.weight": {512, 0}, "self_attn.kv_b_proj.weight": {128 * 256, 512},
			"self_attn.o_proj.weight": {7168, 128 * 128},
		},
		dense: mlp(7168, 18432),
		sparse: map[string][3]int{
			"mlp.gate.weight":                     {1, 256, 7168},
			"mlp.gate.e_score_correction_bias":    {1, 256, 1},
			"mlp.switch_mlp.gate_proj.weight":     {256, 2048, 7168},
			"mlp.switch_mlp.up_proj.weight":       {256, 2048, 7168},
			"mlp.switch_mlp.down_proj.weight":     {256, 7168, 2048},
			"mlp.shared_experts.gate_proj.weight": {1, 2048, 7168},
			"mlp.shared_experts.up_proj.weight":   {1, 2048, 7168},
			"mlp.shared_experts.down_proj.weight": {1, 7168, 2048},
		}}
	// Qwen3-0.6B: dense, its head tied to the embeddings.
	qwen3Dense = shape{layers: 28, hidden: 1024, vocab: 151936, tied: true, attn: qwen3Attn(2048, 1024, 1024, 128), dense: mlp(1024, 3072)}
)

// costsOf is what a node reports of a shape: its tensor table filed by
// modelfile.Footprint (the weights alone, no KV).
func costsOf(t *testing.T, s shape) (Model, []tensorRow) {
	t.Helper()
	rows := s.table()
	sizes := map[string]int64{}
	var total int64
	for _, r := range rows {
		sizes[r.name] = r.bytes
		if r.layer < s.layers {
			total += r.bytes
		}
	}
	c := &modelfile.Config{NumHiddenLayers: s.layers}
	if s.experts > 0 {
		c.MoE = &modelfile.MoE{Experts: s.experts, TopK: s.topK}
	}
	fp := c.Footprint(sizes)
	compute, head := fp.Compute()
	return Model{Layers: s.layers, Head: head, Need: total,
		Costs: Costs{Bytes: fp.Bytes, First: fp.First, Last: fp.Last, Compute: compute}}, rows
}

// TestSplitShapes: on real models' tensor tables, a stage's bytes are
// exactly the tensors it loads, while the split balances compute. For a
// mixture the even share of the need that compute alone gives is several
// per cent off (the head weighs 5.5 layers of compute but half a layer of
// memory in Qwen3-30B-A3B; DeepSeek-V3's dense layers hold a twentieth of
// a sparse one), enough to place a stage its node cannot hold; a dense
// model splits as it did without costs.
func TestSplitShapes(t *testing.T) {
	const gb = 1_000_000_000
	for _, tc := range []struct {
		name     string
		s        shape
		k        int
		caps     []int64
		want     []int
		headWant float64 // the head in layers of compute
		oldOff   float64 // the least relative error of the even share on some stage (0: none asked)
		even     []int   // the bounds the even share gives, when they differ
	}{
		// Compute alone cuts 27 + 21 + head; the first stage then holds
		// 34.3 GB, which the even share (30.9 GB) would put in 32 GB.
		{"qwen3-30b-a3b", qwen3MoE, 2, nil, []int{0, 27, 48}, 5.47, 0.09, nil},
		{"qwen3-30b-a3b, 32 GB first node", qwen3MoE, 2, []int64{32 * gb, 64 * gb}, []int{0, 25, 48}, 5.47, 0.09, []int{0, 27, 48}},
		{"qwen3-30b-a3b, 4 stages", qwen3MoE, 4, nil, []int{0, 14, 27, 40, 48}, 5.47, 0.09, nil},
		{"deepseek-v3, 8 stages", deepseekV3, 8, nil, []int{0, 8, 16, 24, 32, 40, 48, 55, 61}, 1.59, 0.15, nil},
		// The dense first layers hold little: a node of 125 GB takes
		// them and five sparse ones (119 GB), which the even share
		// counts as 171 GB.
		{"deepseek-v3, a small first node", deepseekV3, 8, []int64{125 * gb, 200 * gb, 200 * gb, 200 * gb, 200 * gb, 200 * gb, 200 * gb, 200 * gb},
			[]int{0, 8, 16, 24, 32, 40, 48, 55, 61}, 1.59, 0.15, []int{0, 5, 14, 22, 30, 38, 46, 54, 61}},
		// Tied: the first stage holds the embeddings, the last the same
		// matrix as its head (the even share missed the first's).
		{"qwen3-0.6b", qwen3Dense, 2, nil, []int{0, 19, 28}, 9.89, 0, nil},
		{"qwen3-0.6b, 3 stages", qwen3Dense, 3, nil, []int{0, 13, 25, 28}, 9.89, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, rows := costsOf(t, tc.s)
			if math.Abs(m.Head-tc.headWant) > 0.01 {
				t.Errorf("head = %.3f layers of compute, want %.2f", m.Head, tc.headWant)
			}
			got, ok := Split(m, tc.k, tc.caps)
			if !ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("Split = %v, %v; want %v", got, ok, tc.want)
			}
			even := Model{Layers: m.Layers, Head: m.Head, Need: m.Need} // no per-layer costs
			if tc.even != nil {
				if old, _ := Split(even, tc.k, tc.caps); fmt.Sprint(old) != fmt.Sprint(tc.even) {
					t.Errorf("the even share splits at %v, want %v", old, tc.even)
				}
			}
			worst := 0.0
			for i := range tc.k {
				a, b := got[i], got[i+1]
				want := loads(rows, a, b, m.Layers)
				if sb := m.StageBytes(a, b); sb != want {
					t.Errorf("stage [%d, %d): %d bytes, it loads %d", a, b, sb, want)
				}
				if tc.caps != nil && want > tc.caps[i] {
					t.Errorf("stage [%d, %d) loads %d bytes over its node's %d", a, b, want, tc.caps[i])
				}
				worst = max(worst, math.Abs(float64(even.StageBytes(a, b)-want))/float64(want))
			}
			if tc.oldOff > 0 && worst < tc.oldOff {
				t.Errorf("the even share is at most %.3f off: the shape does not tell the accounts apart", worst)
			}
			if tc.oldOff == 0 {
				old, _ := Split(Model{Layers: m.Layers, Head: tc.s.denseHead()}, tc.k, nil)
				if fmt.Sprint(old) != fmt.Sprint(got) {
					t.Errorf("a dense model splits at %v, without costs at %v", got, old)
				}
			}
			t.Logf("bounds %v; the even share is up to %.1f%% off a stage's bytes", got, 100*worst)
		})
	}
}

// denseHead is a dense shape's head in layers by the configuration
// (modelfile.Config.HeadLayers), as the planner counted it before costs.
func (s shape) denseHead() float64 {
	q := s.attn["self_attn.q_proj.weight"][0]
	kv := s.attn["self_attn.k_proj.weight"][0]
	c := modelfile.Config{HiddenSize: s.hidden, IntermediateSize: s.dense["mlp.gate_proj.weight"][0], NumHiddenLayers: s.layers,
		NumAttentionHeads: q / 128, NumKeyValueHeads: kv / 128, HeadDim: 128, VocabSize: s.vocab}
	return c.HeadLayers()
}
