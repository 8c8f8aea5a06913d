package backend

// RoPE is a rotary position embedding as mlx fast.rope takes it. For a row
// at position p (its sequence's Offset plus its index in the sequence),
// pair i < Dims/2 of each head is rotated by the angle θ = (p·Scale)·f_i,
// computed in float32, where f_i = 1/Freqs[i] if Freqs is set, else
// Base^(−2i/Dims). Features from Dims on pass through.
type RoPE struct {
	HeadDim int // width of one head in the rows RoPE is applied to
	Dims    int // rotated features of each head (even, ≤ HeadDim)
	// Traditional rotates adjacent pairs (2i, 2i+1); otherwise halves
	// (i, i+Dims/2), Hugging Face's rotate_half, which Llama and Qwen use.
	Traditional bool
	Base        float64   // used when Freqs is nil
	Freqs       []float32 // Dims/2 periods (mlx's freqs), or nil
	Scale       float32   // position scale (1/factor for linear scaling); 0 means 1
	// InputScale multiplies the first Dims features of each head before
	// rotating (yarn's mscale); 0 means 1.
	InputScale float32
}
