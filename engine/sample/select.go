package sample

import (
	"math"
	"math/bits"
	"slices"
)

// cand is a candidate token: its id and its logit or, once weighed, its
// unnormalised probability.
type cand struct {
	id int32
	v  float32
}

// before is the ranking order of candidates: larger value first, then
// lower id, so that every selection below is deterministic.
func before(a, b cand) bool { return a.v > b.v || a.v == b.v && a.id < b.id }

func compareCands(a, b cand) int {
	switch {
	case before(a, b):
		return -1
	case before(b, a):
		return 1
	}
	return 0
}

// clamp maps +Inf to the largest float32, so that a model emitting +Inf
// still yields finite arithmetic.
func clamp(v float32) float32 { return min(v, math.MaxFloat32) }

// argmax returns the id of the largest logit, the lowest id among equal
// ones, or -1 when every logit is -Inf or NaN.
//
//go:norace
func argmax(logits []float32) int {
	// The maximum of each chunk comes from maxValue, which is fast because
	// it tracks no index; only the first chunk holding the overall maximum
	// is scanned again for its position.
	const chunk = 1024
	at, m := -1, negInf
	for lo := 0; lo < len(logits); lo += chunk {
		if v := maxValue(logits[lo:min(lo+chunk, len(logits))]); v > m {
			at, m = lo, v
		}
	}
	if at < 0 {
		return -1
	}
	for i, v := range logits[at:] {
		if v == m {
			return at + i
		}
	}
	return -1
}

// maxLogit returns the largest logit (clamped) or -Inf.
func maxLogit(logits []float32) float32 { return clamp(maxValue(logits)) }

// maxValue returns the largest value, ignoring NaN, or -Inf. Four
// independent maxima let the loop run without a dependency chain.
//
//go:norace
func maxValue(l []float32) float32 {
	m0, m1, m2, m3 := negInf, negInf, negInf, negInf
	i := 0
	for ; i+4 <= len(l); i += 4 {
		q := l[i : i+4 : i+4]
		if q[0] > m0 {
			m0 = q[0]
		}
		if q[1] > m1 {
			m1 = q[1]
		}
		if q[2] > m2 {
			m2 = q[2]
		}
		if q[3] > m3 {
			m3 = q[3]
		}
	}
	for _, v := range l[i:] {
		if v > m0 {
			m0 = v
		}
	}
	for _, v := range [...]float32{m1, m2, m3} {
		if v > m0 {
			m0 = v
		}
	}
	return m0
}

// heapTopKLimit is the largest k whose top-k selection scans with a heap;
// larger ones use quickselect.
const heapTopKLimit = 256

// topKHeap appends to dst[:0] the k highest-ranked logits that are > -Inf,
// in no particular order. It keeps a heap whose root is the worst kept
// candidate; once the heap is full, a chunk of the row whose maximum does
// not beat the root is skipped after maxValue's fast scan.
//
//go:norace
func topKHeap(logits []float32, k int, dst []cand) []cand {
	const chunk = 128
	h := dst[:0]
	for lo := 0; lo < len(logits); lo += chunk {
		q := logits[lo:min(lo+chunk, len(logits))]
		if len(h) == k && maxValue(q) <= h[0].v {
			continue
		}
		for j, v := range q {
			if !(v > negInf) {
				continue
			}
			id := int32(lo + j)
			if len(h) < k {
				h = append(h, cand{id, clamp(v)})
				heapUp(h, len(h)-1)
				continue
			}
			// Ids increase, so an equal logit ranks after every kept one.
			if v <= h[0].v || clamp(v) <= h[0].v {
				continue
			}
			h[0] = cand{id, clamp(v)}
			heapDown(h, 0)
		}
	}
	return h
}

// The heap is ordered so that h[0] ranks after every other element.
func heapUp(h []cand, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !before(h[parent], h[i]) {
			return
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func heapDown(h []cand, i int) {
	for {
		worst := i
		if l := 2*i + 1; l < len(h) && before(h[worst], h[l]) {
			worst = l
		}
		if r := 2*i + 2; r < len(h) && before(h[worst], h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}

// smallRange is the size below which selections sort instead of
// partitioning.
const smallRange = 16

// selectTop rearranges c so that c[:k] holds its k highest-ranked
// candidates, in no particular order (introselect: quickselect with a
// median-of-three pivot, falling back to sorting after too many rounds).
//
//go:norace
func selectTop(c []cand, k int) {
	lo, hi := 0, len(c)
	for depth := 2 * bits.Len(uint(len(c))); hi-lo > smallRange && depth > 0; depth-- {
		p := lo + partition(c[lo:hi])
		switch {
		case k < p:
			hi = p
		case k > p+1:
			lo = p + 1
		default: // c[:p] or c[:p+1] are the k best
			return
		}
	}
	slices.SortFunc(c[lo:hi], compareCands)
}

// nucleus rearranges the weighed candidates c, whose best one weighs 1, so
// that c[:n] is the shortest prefix of c in ranking order whose weights sum
// to at least target, and returns n (len(c) if no prefix reaches target).
//
// A language model's nucleus is usually a few tokens, so nucleus first
// moves the candidates weighing at least 2^-8, then 2^-20, to the front:
// they are a prefix of the ranking, and if their weights reach target the
// exact search runs on them only.
//
//go:norace
func nucleus(c []cand, target float64) int {
	n, acc := 0, 0.0
	for _, tau := range [...]float32{0x1p-8, 0x1p-20} {
		for i := n; i < len(c); i++ {
			if c[i].v >= tau {
				acc += float64(c[i].v)
				c[n], c[i] = c[i], c[n]
				n++
			}
		}
		if acc >= target {
			return nucleusSearch(c[:n], target)
		}
	}
	// c[:n] weighs less than target, so all of it is in.
	return n + nucleusSearch(c[n:], target-acc)
}

// nucleusSearch is nucleus by partitioning: only the partitions that
// straddle the boundary are visited, and only the last small one sorted.
//
//go:norace
func nucleusSearch(c []cand, target float64) int {
	lo, hi := 0, len(c)
	acc := 0.0 // weight of c[:lo], always < target
	for depth := 2 * bits.Len(uint(len(c))); hi-lo > smallRange && depth > 0; depth-- {
		p := lo + partition(c[lo:hi])
		s := sumWeights(c[lo:p])
		if acc+s >= target {
			hi = p
			continue
		}
		acc += s + float64(c[p].v)
		if acc >= target {
			return p + 1
		}
		lo = p + 1
	}
	slices.SortFunc(c[lo:hi], compareCands)
	for i := lo; i < hi; i++ {
		acc += float64(c[i].v)
		if acc >= target {
			return i + 1
		}
	}
	return hi
}

// partition puts a median-of-three pivot at its ranked place p and returns
// p: c[:p] ranks before it and c[p+1:] after it. len(c) >= 3.
//
//go:norace
func partition(c []cand) int {
	n := len(c)
	medianToFront(c, 0, n/2, n-1)
	pivot := c[0]
	i, j := 1, n-1
	for {
		for i <= j && before(c[i], pivot) {
			i++
		}
		for i <= j && before(pivot, c[j]) {
			j--
		}
		if i >= j {
			break
		}
		c[i], c[j] = c[j], c[i]
		i++
		j--
	}
	c[0], c[j] = c[j], c[0]
	return j
}

// medianToFront moves the median of c[a], c[b], c[z] to c[a].
func medianToFront(c []cand, a, b, z int) {
	if before(c[b], c[a]) {
		c[a], c[b] = c[b], c[a]
	}
	// Now c[a] ranks after c[b]; the median is the better of c[a], c[z]
	// if c[z] ranks after c[b], else c[b].
	if before(c[z], c[b]) {
		c[a], c[b] = c[b], c[a]
		return
	}
	if before(c[z], c[a]) {
		c[a], c[z] = c[z], c[a]
	}
}

//go:norace
func sumWeights(c []cand) float64 {
	s := 0.0
	for _, x := range c {
		s += float64(x.v)
	}
	return s
}
