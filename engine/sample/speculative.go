package sample

import "slices"

// Prob is a token id and its probability.
type Prob struct {
	ID int
	P  float64
}

// Dist is a probability distribution over token ids, listed by id; ids
// not listed have probability 0.
type Dist []Prob

// At is the probability of id.
func (d Dist) At(id int) float64 {
	i, ok := slices.BinarySearchFunc(d, id, func(p Prob, id int) int { return p.ID - id })
	if !ok {
		return 0
	}
	return d[i].P
}

// Draw samples the next token like Sample and also returns the
// distribution it was drawn from, after every transform (the q of
// speculative decoding, when this sampler is a draft model's). Greedy
// samplers return a point mass on the argmax.
func (s *Sampler) Draw(in Input) (Result, Dist, error) {
	src, err := s.transform(in)
	if err != nil {
		return Result{}, nil, err
	}
	if s.temperature == 0 {
		src, id := s.greedy(src, in)
		r, err := s.result(src, id)
		if err != nil {
			return r, nil, err
		}
		return r, Dist{{ID: id, P: 1}}, nil
	}
	u := s.rng.Float64()
	c, total := s.truncate(src)
	id := pick(c, u*total)
	r, err := s.result(src, id)
	if err != nil {
		return r, nil, err
	}
	return r, distOf(c, total), nil
}

// Verify is one position of speculative decoding: the draft proposed
// token draft, drawn from q (nil: proposed deterministically), and in
// holds the target's logits at that position. It returns the token the
// position takes and whether it is the draft; a rejected draft ends the
// verified run, the returned token replacing it.
//
// The target's distribution p is the one Sample draws from (every
// transform of in, the mask included). Greedy: the draft is accepted iff
// it is p's argmax, and the token is always that argmax, so the output
// is the one Sample gives. Otherwise (Leviathan et al. 2023, Chen et al.
// 2023): accept with probability min(1, p(draft)/q(draft)); on rejection
// draw from max(0, p − q) renormalised. The token is then distributed as
// p exactly, whatever q is. An accepted draft takes one number from the
// generator, a rejected one two.
func (s *Sampler) Verify(in Input, draft int, q Dist) (Result, bool, error) {
	src, err := s.transform(in)
	if err != nil {
		return Result{}, false, err
	}
	if s.temperature == 0 {
		src, id := s.greedy(src, in)
		r, err := s.result(src, id)
		return r, err == nil && id == draft, err
	}
	u := s.rng.Float64()
	c, total := s.truncate(src)
	if len(c) == 0 {
		return Result{}, false, ErrNoCandidates
	}
	pd := 0.0
	for _, x := range c {
		if int(x.id) == draft {
			pd = float64(x.v) / total
			break
		}
	}
	if q == nil { // a point mass on the draft
		q = Dist{{ID: draft, P: 1}}
	}
	if qd := q.At(draft); pd > 0 && u*qd < pd {
		r, err := s.result(src, draft)
		return r, err == nil, err
	}
	// The residual max(0, p − q) over p's candidates (elsewhere p is 0),
	// with q spread over a vocabulary-sized scratch row.
	if s.qrow == nil {
		s.qrow = make([]float64, s.vocab)
	}
	for _, x := range q {
		if x.ID >= 0 && x.ID < s.vocab {
			s.qrow[x.ID] = x.P
		}
	}
	rest := 0.0
	for i, x := range c {
		w := max(float64(x.v)/total-s.qrow[x.id], 0)
		c[i].v = float32(w)
		rest += float64(c[i].v)
	}
	for _, x := range q {
		if x.ID >= 0 && x.ID < s.vocab {
			s.qrow[x.ID] = 0
		}
	}
	u2 := s.rng.Float64()
	if rest <= 0 {
		// p ≤ q everywhere p lives, and yet the draft was rejected: only
		// rounding gets here (p = q). Take p itself.
		c, total = s.truncate(src)
		return s.resultOf(src, pick(c, u2*total))
	}
	return s.resultOf(src, pick(c, u2*rest))
}

func (s *Sampler) resultOf(src []float32, id int) (Result, bool, error) {
	r, err := s.result(src, id)
	return r, false, err
}

// pick returns the candidate at cumulative weight r, or -1 if c is empty.
//
//go:norace
func pick(c []cand, r float64) int {
	if len(c) == 0 {
		return -1
	}
	acc := 0.0
	for _, x := range c {
		acc += float64(x.v)
		if r < acc {
			return int(x.id)
		}
	}
	return int(c[len(c)-1].id)
}

// distOf turns weighed candidates into a Dist.
//
//go:norace
func distOf(c []cand, total float64) Dist {
	d := make(Dist, 0, len(c))
	for _, x := range c {
		if x.v > 0 {
			d = append(d, Prob{ID: int(x.id), P: float64(x.v) / total})
		}
	}
	byID := func(a, b Prob) int { return a.ID - b.ID }
	if !slices.IsSortedFunc(d, byID) { // top-k and top-p reorder
		slices.SortFunc(d, byID)
	}
	return d
}

// Greedy reports whether the sampler takes the argmax.
func (s *Sampler) Greedy() bool { return s.temperature == 0 }
