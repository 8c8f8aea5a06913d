// Package sample turns one row of logits into the next token of a
// sequence: the sampler behind the OpenAI-style temperature, top_k, top_p,
// min_p, repetition/presence/frequency penalties, logit_bias, seed,
// logprobs and top_logprobs request fields.
//
// A Sampler serves one sequence. Each call of Sample transforms the row in
// this order:
//
//  1. Mask (constrained decoding): rejected tokens get -Inf.
//  2. Repetition penalty (HF/llama.cpp): for each distinct token among the
//     last RepetitionWindow prompt+output tokens, a logit l > 0 becomes
//     l/penalty, otherwise l·penalty.
//  3. Presence and frequency penalties (OpenAI): l − presence·[c>0] −
//     frequency·c, with c the token's count in the generated output only
//     (prompt tokens are not counted, as in OpenAI and vLLM).
//  4. Logit bias: l + bias[id]. It comes last so that −100 bans and +100
//     forces a token whatever the penalties did.
//  5. Temperature 0: the argmax (ties to the lowest id), done.
//     Otherwise: temperature (l/T), top-k (the k best by logit, ties to
//     the lower id), softmax over the survivors, top-p (the shortest
//     most-likely-first prefix whose probability reaches top_p), min-p
//     (probability ≥ min_p × the best one's), renormalisation and one draw
//     with a uniform number from the sequence's generator.
//
// Log-probabilities (logprobs, top_logprobs) are those OpenAI reports: the
// log-softmax of the logits after steps 1–4, before temperature and
// truncation, computed stably in float64. Masked tokens have -Inf.
//
// Greedy decoding with a mask tests the argmax first and masks the whole
// row only if it is rejected, or if log-probabilities are asked for (they
// are those of the masked distribution).
//
// Seeded samplers use a PCG generator seeded from the seed, others one
// seeded from crypto/rand. Every non-greedy call takes exactly one number
// from it, so the same seed and the same logits give the same tokens.
//
// Top-k scans the row with a heap (small k) or quickselect; top-p
// partitions around the nucleus boundary instead of sorting the row; no
// vocabulary-sized buffer is allocated after the first call. Weights are
// float32, computed with an exponential accurate to 1e-8; a token less
// likely than 2^-124 times the most likely one counts as impossible. Ties
// are broken towards the lower token id everywhere (argmax, top-k, top-p),
// so that results depend only on the logits and the seed.
//
// Under the race detector the loops over the vocabulary (masking, the
// maximum, weighing, selection, log-sum-exp) are //go:norace: they touch
// the caller's row, which every call declares read at once (package
// fusion/internal/race), and the sampler's own scratch, which one
// goroutine owns. Instrumented, they were most of the CPU time of the
// runner's constrained-decoding suites under -race (make test).
package sample
