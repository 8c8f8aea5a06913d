package gguf

import "math"

// The K-quant reference quantizers (ggml's quantize_row_q{4,5,6}_K_ref).
// All arithmetic is float32 with each product rounded before it is added
// (explicit float32 conversions stop Go from fusing multiply-adds), which
// is what ggml's scalar C does when the compiler does not contract.

// groupMaxEps is ggml's GROUP_MAX_EPS: groups with a smaller maximum are
// treated as all zero.
const groupMaxEps = 1e-15

// nearestInt rounds to the nearest integer, ties to even, for |f| up to
// 2^22 (ggml's nearest_int: adding 1.5·2^23 leaves the integer in the low
// mantissa bits).
func nearestInt(f float32) int {
	v := float32(f) + 12582912 // the conversion keeps a caller's product from fusing into this add
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// makeQKX2Quants fits x ≈ scale·L − min with L in [0, nmax], searching
// nstep+1 candidate scales around nmax/(max−min) and refining scale and min
// by weighted least squares (ggml's make_qkx2_quants). It returns the scale
// and min (min ≥ 0, subtracted) and fills L; laux is scratch.
//
//go:norace
func makeQKX2Quants(nmax int, x, weights []float32, L, laux []uint8, rmin, rdelta float32, nstep int, useMAD bool) (scale, theMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		for i := range L[:n] {
			L[i] = 0
		}
		return 0, -lo
	}
	iscale := float32(nmax) / (hi - lo)
	scale = 1 / iscale
	errOf := func(s, m float32, l []uint8) float32 {
		var e float32
		for i := range n {
			diff := float32(s*float32(l[i])) + m - x[i]
			if useMAD {
				diff = abs32(diff)
			} else {
				diff = diff * diff
			}
			e += float32(weights[i] * diff)
		}
		return e
	}
	for i := range n {
		L[i] = uint8(clampInt(nearestInt(iscale*(x[i]-lo)), 0, nmax))
	}
	bestErr := errOf(scale, lo, L)
	if nstep < 1 {
		return scale, -lo
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + float32(nmax)) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := clampInt(nearestInt(iscale*(x[i]-lo)), 0, nmax)
			laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D <= 0 {
			continue
		}
		thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
		thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		if cur := errOf(thisScale, thisMin, laux); cur < bestErr {
			copy(L[:n], laux[:n])
			bestErr = cur
			scale, lo = thisScale, thisMin
		}
	}
	return scale, -lo
}

// makeQXQuants fits x ≈ scale·(L − nmax) with L in [0, 2·nmax), weighting
// by x² and trying 18 scales around −nmax/max (ggml's make_qx_quants with
// rmse_type 1 and no importance weights).
//
//go:norace
func makeQXQuants(nmax int, x []float32, L []int8) float32 {
	maxv, amax := absMax(x)
	if amax < groupMaxEps {
		for i := range L[:len(x)] {
			L[i] = 0
		}
		return 0
	}
	sums := func(iscale float32, store bool) (sumLX, sumL2 float32) {
		for i, v := range x {
			l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
			if store {
				L[i] = int8(l + nmax)
			}
			w := v * v
			fl := float32(l)
			sumLX += float32(float32(w*v) * fl)
			sumL2 += float32(float32(w*fl) * fl)
		}
		return sumLX, sumL2
	}
	iscale := float32(-nmax) / maxv
	sumLX, sumL2 := sums(iscale, true)
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / maxv
		slx, sl2 := sums(iscale, false)
		if sl2 > 0 && slx*slx > best*sl2 {
			sums(iscale, true)
			scale = slx / sl2
			best = scale * slx
		}
	}
	return scale
}

// packScalesK4 stores eight 6-bit scales and mins the way scaleMinK4
// reads them.
//
//go:norace
func packScalesK4(ls, lm [8]uint8, q []byte) {
	for j := range 8 {
		if j < 4 {
			q[j] = ls[j]
			q[j+4] = lm[j]
		} else {
			q[j+4] = ls[j]&0x0f | (lm[j]&0x0f)<<4
			q[j-4] |= (ls[j] >> 4) << 6
			q[j] |= (lm[j] >> 4) << 6
		}
	}
}

// quantScalesK quantizes a block's eight sub-block scales and mins to six
// bits each against their maxima, returning the fp16 super-scales.
//
//go:norace
func quantScalesK(scales, mins [8]float32, y []byte) {
	var maxScale, maxMin float32
	for j := range 8 {
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	var ls, lm [8]uint8
	for j := range 8 {
		ls[j] = min(63, uint8(nearestInt(invScale*scales[j])))
		lm[j] = min(63, uint8(nearestInt(invMin*mins[j])))
	}
	packScalesK4(ls, lm, y[4:16])
	putF16(y, maxScale/63)
	putF16(y[2:], maxMin/63)
}

// quantSubblocksK fits each 32-element sub-block of a Q4_K/Q5_K block
// and returns its scales, mins and first-pass levels.
//
//go:norace
func quantSubblocksK(x []float32, nmax int, rmin, rdelta float32, nstep int, L []uint8) (scales, mins [8]float32) {
	var weights [32]float32
	var laux [32]uint8
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := sqrt32(sumX2 / 32)
		for l, v := range xs {
			weights[l] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(nmax, xs, weights[:], L[32*j:32*j+32], laux[:], rmin, rdelta, nstep, false)
	}
	return scales, mins
}

// requantK re-derives the levels of each sub-block from the stored
// (quantized) scales and mins.
//
//go:norace
func requantK(x []float32, y []byte, nmax int, L []uint8) {
	d, dmin := f16(y), f16(y[2:])
	for j := range 8 {
		sc, m := scaleMinK4(j, y[4:16])
		ds := d * float32(sc)
		if ds == 0 {
			continue
		}
		dm := dmin * float32(m)
		for ii := range 32 {
			l := nearestInt((x[32*j+ii] + dm) / ds)
			L[32*j+ii] = uint8(clampInt(l, 0, nmax))
		}
	}
}

//go:norace
func quantBlockQ4_K(x []float32, y []byte) {
	var L [qkK]uint8
	scales, mins := quantSubblocksK(x, 15, -1, 0.1, 20, L[:])
	quantScalesK(scales, mins, y)
	requantK(x, y, 15, L[:])
	q := y[16:]
	for j := 0; j < qkK; j += 64 {
		for l := range 32 {
			q[l] = L[j+l] | L[j+l+32]<<4
		}
		q = q[32:]
	}
}

//go:norace
func quantBlockQ5_K(x []float32, y []byte) {
	var L [qkK]uint8
	scales, mins := quantSubblocksK(x, 31, -0.5, 0.1, 15, L[:])
	quantScalesK(scales, mins, y)
	requantK(x, y, 31, L[:])
	qh, ql := y[16:48], y[48:]
	clear(qh)
	m1, m2 := uint8(1), uint8(2)
	for n := 0; n < qkK; n += 64 {
		for j := range 32 {
			l1, l2 := L[n+j], L[n+j+32]
			if l1 > 15 {
				l1 -= 16
				qh[j] |= m1
			}
			if l2 > 15 {
				l2 -= 16
				qh[j] |= m2
			}
			ql[j] = l1 | l2<<4
		}
		m1 <<= 2
		m2 <<= 2
		ql = ql[32:]
	}
}

//go:norace
func quantBlockQ6_K(x []float32, y []byte) {
	var L [qkK]int8
	var scales [16]float32
	var maxScale, maxAbs float32
	for ib := range 16 {
		s := makeQXQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
		scales[ib] = s
		if a := abs32(s); a > maxAbs {
			maxAbs, maxScale = a, s
		}
	}
	if maxAbs < groupMaxEps {
		clear(y)
		return
	}
	iscale := -128 / maxScale
	putF16(y[208:], 1/iscale)
	sc := y[192:208]
	for ib := range 16 {
		sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
	}
	d := f16(y[208:])
	for j := range 16 {
		ds := d * float32(int8(sc[j]))
		if ds == 0 {
			continue
		}
		for ii := range 16 {
			l := clampInt(nearestInt(x[16*j+ii]/ds), -32, 31)
			L[16*j+ii] = int8(l + 32)
		}
	}
	ql, qh := y[:128], y[128:192]
	for j := 0; j < qkK; j += 128 {
		for l := range 32 {
			a, b, c, e := uint8(L[j+l]), uint8(L[j+l+32]), uint8(L[j+l+64]), uint8(L[j+l+96])
			ql[l] = a&0x0f | (c&0x0f)<<4
			ql[l+32] = b&0x0f | (e&0x0f)<<4
			qh[l] = a>>4 | (b>>4)<<2 | (c>>4)<<4 | (e>>4)<<6
		}
		ql = ql[64:]
		qh = qh[32:]
	}
}
