package backend

import (
	"context"
	"fmt"
)

// Backend owns a device: the weights uploaded to it, the KV caches on it,
// and the steps run on it. Implementations are safe for concurrent use,
// but a model runs one Step at a time.
type Backend interface {
	// Name identifies the backend ("cpu", "mlx").
	Name() string
	// Weight makes a matrix usable by Linear and Embed. The backend may
	// keep references to w's bytes (the CPU backend uses them in place),
	// which must then stay valid until the backend is closed.
	Weight(w WeightData) (Weight, error)
	// Vector makes a norm weight usable by RMSNorm.
	Vector(v VectorData) (Vector, error)
	// NewKVCache allocates the KV cache of one sequence.
	NewKVCache(spec KVSpec) (KVCache, error)
	// NewStep starts one forward pass. ctx bounds the blocking calls of the
	// step (Read, Eval).
	NewStep(ctx context.Context) Step
	// Close releases the backend's own resources (worker threads). Weights
	// and caches must not be used afterwards.
	Close() error
}

// Releaser is implemented by backends whose weights hold memory of their
// own (MLX's arrays; the CPU backend uses the file's bytes and needs
// nothing). Release frees weights and vectors, which must not be used
// afterwards; a model calls it when it closes, before its weight files,
// whose bytes the backend may still reference.
type Releaser interface {
	Release(weights []Weight, vectors []Vector)
}

// Array is an activation matrix [rows, cols] belonging to one Step: a
// float32 buffer on the CPU, a lazy array on MLX. It is valid until the
// step is closed or a Release drops it.
type Array interface {
	Rows() int
	Cols() int
}

// Weight is a matrix [Out, In] on a backend, with its additive bias if it
// has one: a linear layer, an embedding table or an LM head.
type Weight interface {
	Out() int
	In() int
	// Bytes is the exact size of the data the backend keeps for it.
	Bytes() int64
}

// Vector is a float vector on a backend (an RMSNorm weight).
type Vector interface {
	Len() int
	Bytes() int64
}

// Mark is a position in a Step's arena; see Step.Release.
type Mark int

// Step is one forward pass. Its ops build (MLX) or compute (CPU) arrays;
// they panic on shape errors, which are bugs, and record backend failures
// for Err. A Step is used by one goroutine.
type Step interface {
	// Input makes an array from float32 values, row-major [rows, cols]
	// (a hidden state handed over by the previous stage).
	Input(rows, cols int, data []float32) Array
	// Embed gathers rows of table, widened to float32: out[i] = table[ids[i]]
	// (mlx take along axis 0; quantized tables are dequantized row by row).
	Embed(table Weight, ids []int32) Array
	// Linear computes x·Wᵀ + bias: [rows, In] → [rows, Out].
	Linear(x Array, w Weight) Array
	// RMSNorm normalizes every consecutive group of w.Len() features of
	// each row, x·rsqrt(mean(x²) + eps), in float32, then multiplies by w
	// (mlx fast.rms_norm). w.Len() is the row width for a layer norm, the
	// head width for Qwen3's per-head q/k norms.
	RMSNorm(x Array, w Vector, eps float32) Array
	// RoPE rotates every head of every row by the row's position in its
	// sequence (the sequence's Offset plus the row's index within it), as
	// mlx fast.rope does; see RoPE.
	RoPE(x Array, r *RoPE, b *Batch) Array
	// Attention appends k and v ([rows, kvHeads·headDim]) to the caches of
	// the batch's sequences at layer, then computes causal scaled
	// dot-product attention of q ([rows, heads·headDim]) over each
	// sequence's cached keys and values: query i of a sequence sees keys
	// 0 … Offset+i. heads must be a multiple of the cache's KV heads (GQA,
	// K/V never repeated). Returns [rows, heads·headDim]. With k and v
	// both nil nothing is appended: the cache at layer must already hold
	// the batch's new rows (an earlier layer of the same step wrote them:
	// Gemma 4's KV sharing), and q attends over them (WindowAttention and
	// SinkAttention alike).
	Attention(layer int, q, k, v Array, scale float32, b *Batch) Array
	// LayerNorm normalizes every row to zero mean and unit variance,
	// (x−mean)·rsqrt(var + eps), in float32, then multiplies by w and adds
	// bias (BERT's post-norm; mlx fast.layer_norm). w and bias have the
	// row's width.
	LayerNorm(x Array, w, bias Vector, eps float32) Array
	// GELU returns x·Φ(x) elementwise, with the exact normal CDF
	// Φ(x) = (1 + erf(x/√2))/2 (BERT's "gelu"; mlx nn.gelu).
	GELU(x Array) Array
	// EncoderAttention computes bidirectional scaled dot-product
	// attention without a cache: the rows are sequences of lens[i] rows,
	// one after the other, and every query of a sequence sees every key of
	// its own sequence and none of another's (what a padding mask does for
	// a padded batch). q, k, v are [rows, heads·headDim]; returns the same
	// shape (mlx fast.scaled_dot_product_attention without a mask, per
	// sequence).
	EncoderAttention(q, k, v Array, heads int, scale float32, lens []int) Array
	// CrossAttention computes scaled dot-product attention of every query
	// row of q [rows, heads·headDim] over every row of k and v [n,
	// heads·headDim], without a mask or a cache (an encoder-decoder's
	// cross-attention: Whisper's decoder over the encoded audio). Returns
	// [rows, heads·headDim] (mlx fast.scaled_dot_product_attention without
	// a mask).
	CrossAttention(q, k, v Array, heads int, scale float32) Array
	// Conv1D convolves the rows of x [rows, C] (time along rows, channels
	// along columns) with w [Out, kernel·C]: output row t is
	// Σ_j x[t·stride + j − pad]·W_jᵀ + bias, where W_j is columns
	// [j·C, (j+1)·C) of w and rows outside x read as zeros. So w holds
	// PyTorch's [Out, C, kernel] weight transposed to [Out, kernel, C]
	// (mlx conv1d's layout). Returns [(rows + 2·pad − kernel)/stride + 1,
	// Out] (Whisper's convolution stem).
	Conv1D(x Array, w Weight, kernel, stride, pad int) Array
	// WindowAttention is Attention over a sliding window (Gemma's local
	// layers): query i of a sequence, at position p = Offset+i, sees the
	// keys at positions max(0, p−window+1) … p (mlx-lm's
	// create_attention_mask with window_size). The cache keeps every
	// position, so the same cache serves both kinds of layer.
	WindowAttention(layer int, q, k, v Array, scale float32, window int, b *Batch) Array
	// SinkAttention is Attention (window 0) or WindowAttention (window >
	// 0) where each query head h has a learned sink logit sinks[h] in its
	// softmax, whose share is then dropped: p_j = e^{s_j} / (Σ_i e^{s_i} +
	// e^{sinks[h]}) over the visible keys (gpt-oss; mlx
	// fast.scaled_dot_product_attention with sinks). sinks has one value
	// per query head.
	SinkAttention(layer int, q, k, v Array, scale float32, window int, sinks Vector, b *Batch) Array
	// ClampedSwiGLU returns gpt-oss's gated activation elementwise: with
	// g = min(gate, limit) and u = clip(up, −limit, limit),
	// (u + 1)·g·sigmoid(alpha·g) (mlx-lm's swiglu_oai).
	ClampedSwiGLU(gate, up Array, alpha, limit float32) Array
	// GELUTanhGate returns gelu_tanh(gate)·up elementwise, with the tanh
	// approximation gelu_tanh(x) = x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))/2
	// (Gemma's MLP; mlx nn.gelu_approx).
	GELUTanhGate(gate, up Array) Array
	// Softcap returns tanh(x/cap)·cap elementwise (Gemma's logit
	// soft-capping).
	Softcap(x Array, cap float32) Array
	// Scale returns x·c elementwise (Gemma's embedding scale).
	Scale(x Array, c float32) Array
	// Add returns a + b elementwise.
	Add(a, b Array) Array
	// SwiGLU returns silu(gate)·up elementwise.
	SwiGLU(gate, up Array) Array
	// Rows gathers rows of x: out[i] = x[rows[i]].
	Rows(x Array, rows []int) Array
	// ConcatRows stacks arrays of the same width, one after the other
	// (FLUX's joint text+image sequence).
	ConcatRows(parts ...Array) Array
	// SiLU returns x·sigmoid(x) elementwise.
	SiLU(x Array) Array
	// Modulate returns LayerNorm(x)·(1 + scale) + shift, the layer norm
	// without affine weights, (x−mean)·rsqrt(var + eps) in float32, and
	// shift and scale one row [1, cols] broadcast over x's rows (FLUX's
	// adaLN).
	Modulate(x, shift, scale Array, eps float32) Array
	// Gate returns res + g·x, with g one row [1, cols] broadcast over the
	// rows (FLUX's gated residual).
	Gate(res, x, g Array) Array
	// RoPETable rotates adjacent pairs (2i, 2i+1) of every head of x
	// ([rows, heads·d]) by per-row tables cos and sin ([rows, d], each
	// angle's value at both features of its pair): out = x·cos + r·sin,
	// with r[2i] = −x[2i+1] and r[2i+1] = x[2i] (diffusers'
	// apply_rotary_emb with real tables interleaved, as FLUX.2's 4-axis
	// positions are not one position per row).
	RoPETable(x, cos, sin Array) Array
	// ExpertLinear and MixRows, for mixtures of experts (moe.go).
	ExpertOps
	// HeadSlice, HeadConcat and HeadLinear, for multi-head latent
	// attention (heads.go).
	HeadOps
	// ReLU and RelAttention, for VITS text-to-speech (vits.go).
	VITSOps
	// Conv2D, GroupNorm and Upsample2x, for convolutional image models
	// (image.go).
	ImageOps
	// LSTMCell, Sigmoid and ComplexAbs, for recurrent audio models
	// (rnn.go).
	RNNOps
	// CausalConv, GatedDelta and SigmoidGate, for Gated DeltaNet linear
	// attention (deltanet.go).
	RecurrentOps

	// Mark and Release bound the memory of a pass: Release frees every
	// array made since m except keep, which it returns (valid, possibly
	// moved). Model code releases after each layer.
	Mark() Mark
	Release(m Mark, keep Array) Array
	// Eval computes the arrays now (a no-op for eager backends).
	Eval(arrays ...Array) error
	// Read evaluates x and copies its values out, row-major.
	Read(x Array) ([]float32, error)
	// Err is the first failure recorded by the step, if any.
	Err() error
	// Close frees every array of the step.
	Close()
}

// EncoderShape checks the arguments of Step.EncoderAttention and returns
// the head width, or an error saying what does not fit; backends panic
// with it (a shape error is a bug of the model code).
func EncoderShape(q, k, v Array, heads int, lens []int) (headDim int, err error) {
	rows := 0
	for _, n := range lens {
		if n <= 0 {
			return 0, fmt.Errorf("EncoderAttention: sequence of %d rows", n)
		}
		rows += n
	}
	if q.Rows() != rows || k.Rows() != rows || v.Rows() != rows || k.Cols() != q.Cols() || v.Cols() != q.Cols() || heads <= 0 || q.Cols()%heads != 0 {
		return 0, fmt.Errorf("EncoderAttention: q [%d, %d], k [%d, %d], v [%d, %d], %d heads, %d rows in sequences",
			q.Rows(), q.Cols(), k.Rows(), k.Cols(), v.Rows(), v.Cols(), heads, rows)
	}
	return q.Cols() / heads, nil
}

// CrossShape checks the arguments of Step.CrossAttention and returns the
// head width, or an error saying what does not fit.
func CrossShape(q, k, v Array, heads int) (headDim int, err error) {
	if heads <= 0 || q.Cols()%heads != 0 || k.Cols() != q.Cols() || v.Cols() != q.Cols() || k.Rows() != v.Rows() || k.Rows() == 0 || q.Rows() == 0 {
		return 0, fmt.Errorf("CrossAttention: q [%d, %d], k [%d, %d], v [%d, %d], %d heads",
			q.Rows(), q.Cols(), k.Rows(), k.Cols(), v.Rows(), v.Cols(), heads)
	}
	return q.Cols() / heads, nil
}

// ConvShape checks the arguments of Step.Conv1D and returns the number of
// output rows, or an error saying what does not fit.
func ConvShape(x Array, w Weight, kernel, stride, pad int) (rows int, err error) {
	if kernel <= 0 || stride <= 0 || pad < 0 || pad >= kernel || w.In() != kernel*x.Cols() || x.Rows()+2*pad < kernel {
		return 0, fmt.Errorf("Conv1D: x [%d, %d], weight [%d, %d], kernel %d, stride %d, pad %d",
			x.Rows(), x.Cols(), w.Out(), w.In(), kernel, stride, pad)
	}
	return (x.Rows()+2*pad-kernel)/stride + 1, nil
}
