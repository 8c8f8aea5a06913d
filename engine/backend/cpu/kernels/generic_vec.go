package kernels

func axpyGeneric(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func addGeneric(dst, a, b []float32) {
	a = a[:len(dst)]
	b = b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

func mulGeneric(dst, a, b []float32) {
	a = a[:len(dst)]
	b = b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

func scaleGeneric(dst, x []float32, s float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] = x[i] * s
	}
}

func maxGeneric(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	return m
}

func expSubSumGeneric(x []float32, m float32) float32 {
	var sum float32
	for i, v := range x {
		e := expf(v - m)
		x[i] = e
		sum += e
	}
	return sum
}

func swigluGeneric(dst, g, u []float32) {
	g = g[:len(dst)]
	u = u[:len(dst)]
	for i, v := range g {
		dst[i] = v * u[i] / (1 + expf(-v))
	}
}
