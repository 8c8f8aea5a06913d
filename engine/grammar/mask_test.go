package grammar

import (
	"math/rand/v2"
	"testing"

	"fusion/engine/sample"
)

// bruteMask computes the allowed set by feeding every token to a copy;
// under a budget (budget >= 0) a token is allowed only if the document
// can still be finished in budget-1 tokens after it, and if no token is
// the set is the unbudgeted one (Mask's contract).
func bruteMask(m *Matcher, v *Vocab, budget int) sample.Bitset {
	dst := sample.NewBitset(v.Size())
	if m.Ended() {
		return dst
	}
	if budget >= 0 {
		dst = bruteMask(m, v, -1)
		within := sample.NewBitset(v.Size())
		any := false
		for id := range v.Size() {
			if !dst.Allowed(id) {
				continue
			}
			c := m.Clone()
			if v.isEOS(id) || func() bool { _, ok := c.AdvanceBytes(v.tokens[id]); return ok && c.Remaining() <= budget-1 }() {
				within.Set(id)
				any = true
			}
		}
		if any {
			return within
		}
		return dst
	}
	for id := range v.Size() {
		if v.isEOS(id) {
			if m.Done() {
				dst.Set(id)
			}
			continue
		}
		if len(v.tokens[id]) == 0 {
			continue
		}
		c := m.Clone()
		if _, ok := c.AdvanceBytes(v.tokens[id]); ok {
			dst.Set(id)
		}
	}
	return dst
}

// checkMasks compares Mask with bruteMask along random generations; with
// slack >= 0 each generation runs under a budget of its shortest document
// plus up to slack tokens.
func checkMasks(t *testing.T, v *Vocab, schemas []string, gens, every, slack int) {
	rng := rand.New(rand.NewPCG(5, 6))
	mask := sample.NewBitset(v.Size())
	checked := 0
	for i, src := range schemas {
		g, err := Compile([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < gens; n++ {
			m := g.NewMatcher()
			budget := -1
			if slack >= 0 {
				budget = m.Remaining() + rng.IntN(slack+1)
			}
			for step := 0; !m.Ended() && step < 400; step++ {
				left := -1
				if budget >= 0 {
					left = max(budget-step, 0)
				}
				m.SetBudget(left)
				m.Mask(v, mask)
				if step%every == 0 {
					want := bruteMask(m, v, left)
					for id := range v.Size() {
						if mask.Allowed(id) != want.Allowed(id) {
							t.Fatalf("schema %d step %d: token %d %q: mask %v, brute force %v", i, step, id, v.tokens[id], mask.Allowed(id), want.Allowed(id))
						}
					}
					checked++
				}
				var allowed []int
				for id := range v.Size() {
					if mask.Allowed(id) {
						allowed = append(allowed, id)
					}
				}
				if err := m.Accept(v, allowed[rng.IntN(len(allowed))]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Logf("%d masks equal to brute force", checked)
}

func TestMaskMatchesBruteForce(t *testing.T) {
	checkMasks(t, NewVocab(worstVocab(), []int{0}), worstSchemas, 5, 1, -1)
}

// TestBudgetMaskMatchesBruteForce: under a budget barely above the
// shortest document, the mask is exactly the tokens after which the
// document can still be finished in time.
func TestBudgetMaskMatchesBruteForce(t *testing.T) {
	checkMasks(t, NewVocab(worstVocab(), []int{0}), worstSchemas, 5, 1, 12)
}

func TestQwenMaskMatchesBruteForce(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	v := qwenVocab(t)
	schemas := []string{benchSchemas[0].schema, `{"type":"array","items":{"type":"string","maxLength":12},"maxItems":3}`, `{"type":"object","additionalProperties":{"anyOf":[{"type":"string","maxLength":3},{"type":"string","minLength":2,"maxLength":5}]}}`}
	checkMasks(t, v, schemas, 1, 7, -1)
	t.Run("budget", func(t *testing.T) { checkMasks(t, v, schemas, 2, 3, 24) })
}
