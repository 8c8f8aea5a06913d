package rnnoise

import "math"

// The pitch analysis of RNNoise (pitch.c and celt_lpc.c from Opus's
// CELT, float build), line for line in float32 so that the chosen period
// is the reference's.

func innerProd(x, y []float32, n int) float32 {
	var s float32
	for i := range n {
		s += x[i] * y[i]
	}
	return s
}

// pitchXcorr is rnn_pitch_xcorr: xcorr[i] = Σ_j x[j]·y[i+j].
func pitchXcorr(x, y, xcorr []float32, n, maxPitch int) {
	for i := range maxPitch {
		xcorr[i] = innerProd(x, y[i:], n)
	}
}

// autocorr is rnn_autocorr without a window: ac[k] = Σ x[i]·x[i−k].
func autocorr(x []float32, ac []float32, lag, n int) {
	fastN := n - lag
	pitchXcorr(x, x, ac, fastN, lag+1)
	for k := 0; k <= lag; k++ {
		var d float32
		for i := k + fastN; i < n; i++ {
			d += x[i] * x[i-k]
		}
		ac[k] += d
	}
}

// lpc is rnn_lpc (Levinson–Durbin, stopping at 30 dB of gain).
func lpc(out []float32, ac []float32, p int) {
	clear(out[:p])
	e := ac[0]
	if ac[0] == 0 {
		return
	}
	for i := range p {
		var rr float32
		for j := range i {
			rr += out[j] * ac[i-j]
		}
		rr += ac[i+1]
		r := -rr / e
		out[i] = r
		for j := range (i + 1) >> 1 {
			t1, t2 := out[j], out[i-1-j]
			out[j] = t1 + r*t2
			out[i-1-j] = t2 + r*t1
		}
		e = e - r*r*e
		if e < .001*ac[0] {
			break
		}
	}
}

// pitchDownsample is rnn_pitch_downsample for one channel: x (len
// samples) low-passed and halved into xLP (len/2), then whitened by a
// 4th-order LPC with a zero.
func pitchDownsample(x []float32, xLP []float32, n int) {
	half := n >> 1
	for i := 1; i < half; i++ {
		xLP[i] = .5 * (.5*(x[2*i-1]+x[2*i+1]) + x[2*i])
	}
	xLP[0] = .5 * (.5*x[1] + x[0])
	var ac [5]float32
	autocorr(xLP, ac[:], 4, half)
	ac[0] *= 1.0001
	for i := 1; i <= 4; i++ {
		ac[i] -= ac[i] * (.008 * float32(i)) * (.008 * float32(i))
	}
	var l [4]float32
	lpc(l[:], ac[:], 4)
	tmp := float32(1)
	for i := range 4 {
		tmp = .9 * tmp
		l[i] = l[i] * tmp
	}
	const c1 = float32(.8)
	lpc2 := [5]float32{l[0] + .8, l[1] + c1*l[0], l[2] + c1*l[1], l[3] + c1*l[2], c1 * l[3]}
	fir5(xLP, lpc2, half)
}

// fir5 is celt_fir5 in place with zero memory.
func fir5(x []float32, num [5]float32, n int) {
	var m0, m1, m2, m3, m4 float32
	for i := range n {
		sum := x[i]
		sum += num[0] * m0
		sum += num[1] * m1
		sum += num[2] * m2
		sum += num[3] * m3
		sum += num[4] * m4
		m4, m3, m2, m1, m0 = m3, m2, m1, m0, x[i]
		x[i] = sum
	}
}

// findBestPitch is find_best_pitch: the two lags of highest normalized
// correlation.
func findBestPitch(xcorr, y []float32, n, maxPitch int, best *[2]int) {
	syy := float32(1)
	bestNum := [2]float32{-1, -1}
	bestDen := [2]float32{0, 0}
	*best = [2]int{0, 1}
	for j := range n {
		syy += y[j] * y[j]
	}
	for i := range maxPitch {
		if xcorr[i] > 0 {
			x16 := xcorr[i] * 1e-12
			num := x16 * x16
			if num*bestDen[1] > bestNum[1]*syy {
				if num*bestDen[0] > bestNum[0]*syy {
					bestNum[1], bestDen[1], best[1] = bestNum[0], bestDen[0], best[0]
					bestNum[0], bestDen[0], best[0] = num, syy, i
				} else {
					bestNum[1], bestDen[1], best[1] = num, syy, i
				}
			}
		}
		syy += y[i+n]*y[i+n] - y[i]*y[i]
		syy = max(1, syy)
	}
}

// pitchSearch is rnn_pitch_search: a coarse search at a quarter of the
// rate, a finer one at half around its two best lags, and a
// pseudo-interpolation; it returns the lag at half rate ×2.
func pitchSearch(xLP, y []float32, n, maxPitch int) int {
	lag := n + maxPitch
	var xLP4 [pitchFrameSize >> 2]float32
	var yLP4 [(pitchFrameSize + pitchMaxPeriod) >> 2]float32
	var xcorr [pitchMaxPeriod >> 1]float32
	for j := range n >> 2 {
		xLP4[j] = xLP[2*j]
	}
	for j := range lag >> 2 {
		yLP4[j] = y[2*j]
	}
	pitchXcorr(xLP4[:], yLP4[:], xcorr[:], n>>2, maxPitch>>2)
	var best [2]int
	findBestPitch(xcorr[:], yLP4[:], n>>2, maxPitch>>2, &best)
	for i := range maxPitch >> 1 {
		xcorr[i] = 0
		if abs(i-2*best[0]) > 2 && abs(i-2*best[1]) > 2 {
			continue
		}
		xcorr[i] = max(-1, innerProd(xLP, y[i:], n>>1))
	}
	findBestPitch(xcorr[:], y, n>>1, maxPitch>>1, &best)
	offset := 0
	if best[0] > 0 && best[0] < (maxPitch>>1)-1 {
		a, b, c := xcorr[best[0]-1], xcorr[best[0]], xcorr[best[0]+1]
		if c-a > .7*(b-a) {
			offset = 1
		} else if a-c > .7*(b-c) {
			offset = -1
		}
	}
	return 2*best[0] - offset
}

func pitchGain(xy, xx, yy float32) float32 {
	return float32(float64(xy) / math.Sqrt(float64(1+xx*yy)))
}

var secondCheck = [16]int{0, 0, 3, 2, 3, 2, 5, 2, 3, 2, 3, 2, 5, 2, 3, 2}

// removeDoubling is rnn_remove_doubling: it looks for a stronger period
// at T/k (k = 2…15), and returns the pitch gain and the period.
func removeDoubling(xs []float32, maxPeriod, minPeriod, n, t0 int, prevPeriod int, prevGain float32) (float32, int) {
	minPeriod0 := minPeriod
	maxPeriod /= 2
	minPeriod /= 2
	t0 /= 2
	prevPeriod /= 2
	n /= 2
	x := xs[maxPeriod:]
	back := func(i int) float32 { return xs[maxPeriod-i] } // x[−i]
	if t0 >= maxPeriod {
		t0 = maxPeriod - 1
	}
	T := t0
	var xx, xy float32
	for i := range n {
		xx += x[i] * x[i]
		xy += x[i] * xs[maxPeriod-t0+i]
	}
	var yyLookup [pitchMaxPeriod + 1]float32
	yyLookup[0] = xx
	yy := xx
	for i := 1; i <= maxPeriod; i++ {
		yy = yy + back(i)*back(i) - x[n-i]*x[n-i]
		yyLookup[i] = max(0, yy)
	}
	yy = yyLookup[t0]
	bestXY, bestYY := xy, yy
	g0 := pitchGain(xy, xx, yy)
	g := g0
	for k := 2; k <= 15; k++ {
		t1 := (2*t0 + k) / (2 * k)
		if t1 < minPeriod {
			break
		}
		var t1b int
		if k == 2 {
			if t1+t0 > maxPeriod {
				t1b = t0
			} else {
				t1b = t0 + t1
			}
		} else {
			t1b = (2*secondCheck[k]*t0 + k) / (2 * k)
		}
		var xy1, xy2 float32
		for i := range n {
			xy1 += x[i] * xs[maxPeriod-t1+i]
			xy2 += x[i] * xs[maxPeriod-t1b+i]
		}
		xy = .5 * (xy1 + xy2)
		yy = .5 * (yyLookup[t1] + yyLookup[t1b])
		g1 := pitchGain(xy, xx, yy)
		var cont float32
		if abs(t1-prevPeriod) <= 1 {
			cont = prevGain
		} else if abs(t1-prevPeriod) <= 2 && 5*k*k < t0 {
			cont = .5 * prevGain
		}
		thresh := max(.3, .7*g0-cont)
		if t1 < 3*minPeriod {
			thresh = max(.4, .85*g0-cont)
		} else if t1 < 2*minPeriod {
			thresh = max(.5, .9*g0-cont)
		}
		if g1 > thresh {
			bestXY, bestYY, T, g = xy, yy, t1, g1
		}
	}
	bestXY = max(0, bestXY)
	var pg float32
	if bestYY <= bestXY {
		pg = 1
	} else {
		pg = bestXY / (bestYY + 1)
	}
	var xc [3]float32
	for k := range 3 {
		xc[k] = innerProd(x, xs[maxPeriod-(T+k-1):], n)
	}
	offset := 0
	if xc[2]-xc[0] > .7*(xc[1]-xc[0]) {
		offset = 1
	} else if xc[0]-xc[2] > .7*(xc[1]-xc[2]) {
		offset = -1
	}
	if pg > g {
		pg = g
	}
	t := 2*T + offset
	if t < minPeriod0 {
		t = minPeriod0
	}
	return pg, t
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
