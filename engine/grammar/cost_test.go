package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"fusion/engine/sample"
)

// TestRemainingIsExact: from random states of every worst-model schema,
// Remaining() bytes really finish the document, one byte at a time, each
// lowering it by one (so it is neither too low nor too high).
func TestRemainingIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i, src := range worstSchemas {
		g, err := Compile([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 30; n++ {
			m := g.NewMatcher()
			// Random bytes first.
			for k := rng.IntN(40); k > 0; k-- {
				var ok []byte
				for b := 0; b < 256; b++ {
					if m.Clone().Advance(byte(b)) {
						ok = append(ok, byte(b))
					}
				}
				if len(ok) == 0 {
					break
				}
				m.Advance(ok[rng.IntN(len(ok))])
			}
			start := m.Remaining()
			for r := start; r > 0; r-- {
				stepped := false
				for b := 0; b < 256 && !stepped; b++ {
					c := m.Clone()
					if c.Advance(byte(b)) && c.Remaining() == r-1 {
						m, stepped = c, true
					}
				}
				if !stepped {
					t.Fatalf("schema %d: no byte lowers Remaining from %d", i, r)
				}
			}
			if !m.Done() {
				t.Fatalf("schema %d: Remaining reached 0 but the document is not done", i)
			}
		}
	}
}

// TestBudgetEndsDocuments: sampling uniformly among allowed tokens under a
// budget barely above the minimum, every document is whole and valid
// within the budget.
func TestBudgetEndsDocuments(t *testing.T) {
	toks := worstVocab()
	v := NewVocab(toks, []int{0})
	rng := rand.New(rand.NewPCG(7, 8))
	mask := sample.NewBitset(len(toks))
	for i, src := range worstSchemas {
		g, err := Compile([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		sch := validator(t, src)
		for n := 0; n < 20; n++ {
			m := g.NewMatcher()
			budget := m.Remaining() + rng.IntN(30)
			var out []byte
			used := 0
			for !m.Ended() {
				m.SetBudget(budget - used)
				m.Mask(v, mask)
				var allowed []int
				for id := range toks {
					if mask.Allowed(id) {
						allowed = append(allowed, id)
					}
				}
				id := allowed[rng.IntN(len(allowed))]
				if err := m.Accept(v, id); err != nil {
					t.Fatal(err)
				}
				if id != 0 {
					used++
					out = append(out, toks[id]...)
				}
				if used > budget {
					t.Fatalf("schema %d: %d tokens over a budget of %d: %q", i, used, budget, out)
				}
			}
			var x any
			if err := json.Unmarshal(out, &x); err != nil {
				t.Fatalf("schema %d: %q: %v", i, out, err)
			}
			inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err := sch.Validate(inst); err != nil {
				t.Fatalf("schema %d: %q does not validate: %v", i, out, err)
			}
		}
	}
}
