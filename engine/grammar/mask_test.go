package grammar

import (
	"math/rand/v2"
	"testing"

	"fusion/engine/sample"
)

// bruteMask computes the allowed set by feeding every token to a copy.
func bruteMask(m *Matcher, v *Vocab) sample.Bitset {
	dst := sample.NewBitset(v.Size())
	if m.Ended() {
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

func checkMasks(t *testing.T, v *Vocab, schemas []string, gens, every int) {
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
			for step := 0; !m.Ended() && step < 400; step++ {
				m.Mask(v, mask)
				if step%every == 0 {
					want := bruteMask(m, v)
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
	checkMasks(t, NewVocab(worstVocab(), []int{0}), worstSchemas, 5, 1)
}

func TestQwenMaskMatchesBruteForce(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	v := qwenVocab(t)
	checkMasks(t, v, []string{benchSchemas[0].schema, `{"type":"array","items":{"type":"string","maxLength":12},"maxItems":3}`, `{"type":"object","additionalProperties":{"anyOf":[{"type":"string","maxLength":3},{"type":"string","minLength":2,"maxLength":5}]}}`}, 1, 7)
}
