package gguf

// The 2- and 3-bit K-quant reference quantizers (ggml's
// quantize_row_q2_K_ref and quantize_row_q3_K_ref), with the same float32
// discipline as quant_k.go.

// makeQ3Quants fits x ≈ scale·L with L in [−nmax, nmax), weighting by x²,
// then moves single levels while that lowers the weighted error (ggml's
// make_q3_quants with do_rmse). L is returned offset by nmax.
//
//go:norace
func makeQ3Quants(nmax int, x []float32, L []int8) float32 {
	maxv, amax := absMax(x)
	if amax < groupMaxEps {
		for i := range L[:len(x)] {
			L[i] = 0
		}
		return 0
	}
	iscale := float32(-nmax) / maxv
	var sumLX, sumL2 float32
	for i, v := range x {
		l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
		L[i] = int8(l)
		w := v * v
		sumLX += float32(float32(w*v) * float32(l))
		sumL2 += float32(float32(w*float32(l)) * float32(l))
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := v * v
			li := float32(L[i])
			slx := sumLX - float32(float32(w*v)*li)
			if slx <= 0 {
				continue
			}
			sl2 := sumL2 - float32(float32(w*li)*li)
			newL := clampInt(nearestInt(float32(v*sl2)/slx), -nmax, nmax-1)
			if newL == int(L[i]) {
				continue
			}
			fl := float32(newL)
			slx += float32(float32(w*v) * fl)
			sl2 += float32(float32(w*fl) * fl)
			if sl2 > 0 && float32(slx*slx)*sumL2 > float32(sumLX*sumLX)*sl2 {
				L[i] = int8(newL)
				sumLX, sumL2 = slx, sl2
				changed++
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range x {
		L[i] += int8(nmax)
	}
	if sumL2 > 0 {
		return sumLX / sumL2
	}
	return 0
}

// packLevels2 stores 2-bit levels: byte l of each 32-byte group holds
// elements l, l+32, l+64 and l+96 of its 128-element half.
//
//go:norace
func packLevels2(L []uint8, qs []byte) {
	for j := 0; j < qkK; j += 128 {
		for l := range 32 {
			qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
		}
	}
}

//go:norace
func quantBlockQ2_K(x []float32, y []byte) {
	const q4scale = 15
	var L [qkK]uint8
	var laux [16]uint8
	var weights [16]float32
	var scales, mins [16]float32
	var maxScale, maxMin float32
	for j := range 16 {
		xs := x[16*j : 16*j+16]
		for l, v := range xs {
			weights[l] = abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(3, xs, weights[:], L[16*j:16*j+16], laux[:], -0.5, 0.1, 15, true)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	sc := y[:16]
	if maxScale > 0 {
		iscale := q4scale / maxScale
		for j := range 16 {
			sc[j] = uint8(nearestInt(iscale * scales[j]))
		}
		putF16(y[80:], maxScale/q4scale)
	} else {
		clear(sc)
		putF16(y[80:], 0)
	}
	if maxMin > 0 {
		iscale := q4scale / maxMin
		for j := range 16 {
			sc[j] |= uint8(nearestInt(iscale*mins[j]) << 4)
		}
		putF16(y[82:], maxMin/q4scale)
	} else {
		putF16(y[82:], 0)
	}
	d, dmin := f16(y[80:]), f16(y[82:])
	for j := range 16 {
		ds := d * float32(sc[j]&0x0f)
		if ds == 0 {
			continue
		}
		dm := dmin * float32(sc[j]>>4)
		for ii := range 16 {
			l := nearestInt((x[16*j+ii] + dm) / ds)
			L[16*j+ii] = uint8(clampInt(l, 0, 3))
		}
	}
	packLevels2(L[:], y[16:80])
}

//go:norace
func quantBlockQ3_K(x []float32, y []byte) {
	var L8 [qkK]int8
	var scales [16]float32
	var maxScale, amax float32
	for j := range 16 {
		scales[j] = makeQ3Quants(4, x[16*j:16*j+16], L8[16*j:16*j+16])
		if a := abs32(scales[j]); a > amax {
			amax, maxScale = a, scales[j]
		}
	}
	sc := y[96:108]
	clear(sc)
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := range 16 {
			l := uint8(clampInt(int(int8(nearestInt(iscale*scales[j]))), -32, 31) + 32)
			if j < 8 {
				sc[j] = l & 0x0f
			} else {
				sc[j-8] |= (l & 0x0f) << 4
			}
			sc[8+j%4] |= (l >> 4) << (2 * (j / 4))
		}
		putF16(y[108:], 1/iscale)
	} else {
		putF16(y[108:], 0)
	}
	d := f16(y[108:])
	stored := scalesQ3K(sc)
	for j := range 16 {
		ds := d * float32(stored[j])
		if ds == 0 {
			continue
		}
		for ii := range 16 {
			l := clampInt(nearestInt(x[16*j+ii]/ds), -4, 3)
			L8[16*j+ii] = int8(l + 4)
		}
	}
	hmask := y[:32]
	clear(hmask)
	var L [qkK]uint8
	for j := range qkK {
		L[j] = uint8(L8[j])
		if L[j] > 3 {
			hmask[j%32] |= 1 << (j / 32)
			L[j] -= 4
		}
	}
	packLevels2(L[:], y[32:96])
}
