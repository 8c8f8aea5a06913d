//go:build amd64 && !purego

package kernels

// AVX2 kernels of the K-quants beside Q4_K and Q6_K (gguf_amd64.s).

//go:noescape
func q5KAVX2(xq *int8, xd, xs *float32, w *byte, nsb int) float32

//go:noescape
func q3KAVX2(xq *int8, xd *float32, w *byte, nsb int) float32

//go:noescape
func q2KAVX2(xq *int8, xd *float32, w *byte, nsb int) float32

// q5KSIMD2 is q5KGeneric in AVX2 (summed in another order).
func q5KSIMD2(a q8Row, w []byte) float32 {
	nsb := len(a.q) / kBlock
	if nsb == 0 {
		return 0
	}
	_ = a.d[nsb*8-1]
	_ = a.s[nsb*8-1]
	_ = w[nsb*q5KBytes-1]
	return q5KAVX2(&a.q[0], &a.d[0], &a.s[0], &w[0], nsb)
}

// q3KSIMD2 is q3KGeneric in AVX2 (summed in another order).
func q3KSIMD2(a q8Row, w []byte) float32 { return kRowCall(q3KAVX2, a, w, q3KBytes) }

// q2KSIMD2 is q2KGeneric in AVX2 (summed in another order).
func q2KSIMD2(a q8Row, w []byte) float32 { return kRowCall(q2KAVX2, a, w, q2KBytes) }

// kRowCall checks the lengths and runs a K-quant row kernel that reads
// the activations' codes and scales, over super-blocks of blockBytes.
func kRowCall(kernel func(xq *int8, xd *float32, w *byte, nsb int) float32, a q8Row, w []byte, blockBytes int) float32 {
	nsb := len(a.q) / kBlock
	if nsb == 0 {
		return 0
	}
	_ = a.d[nsb*8-1]
	_ = w[nsb*blockBytes-1]
	return kernel(&a.q[0], &a.d[0], &w[0], nsb)
}
