package dispatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func nodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%d", i)
	}
	return ids
}

func noLoad(string) int64 { return 0 }

// TestRingRemovalMovesOnlyItsKeys: removing one of N nodes moves about
// 1/N of the keys — only those the removed node had.
func TestRingRemovalMovesOnlyItsKeys(t *testing.T) {
	for _, n := range []int{3, 5, 8, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ids := nodeIDs(n)
			full, less := NewRing(ids, 0), NewRing(ids[1:], 0)
			const keys = 20000
			moved, owned := 0, 0
			for k := range keys {
				key := HashString(fmt.Sprint("key-", k))
				a, b := full.Pick(key, noLoad, 1.25), less.Pick(key, noLoad, 1.25)
				if a == ids[0] {
					owned++
				}
				if a != b {
					moved++
					if a != ids[0] {
						t.Fatalf("key %d moved from %s to %s, though %s is still there", k, a, b, a)
					}
				}
			}
			frac, want := float64(moved)/keys, 1/float64(n)
			t.Logf("%d nodes: removing one moved %.3f of the keys (1/N = %.3f)", n, frac, want)
			if moved != owned || frac < 0.6*want || frac > 1.5*want {
				t.Errorf("moved %d keys (%.3f), the removed node owned %d; want about %.3f", moved, frac, owned, want)
			}
		})
	}
}

// TestRingBoundedLoad: under skewed keys no node goes above ⌈c × avg⌉.
func TestRingBoundedLoad(t *testing.T) {
	tests := []struct {
		nodes int
		c     float64
		hot   float64 // share of requests with the one hot key
	}{
		{4, 1.25, 1}, {4, 1.25, 0.9}, {7, 1.25, 0.5}, {10, 1.1, 0.95}, {3, 2, 1},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("n%d_c%v_hot%v", tc.nodes, tc.c, tc.hot), func(t *testing.T) {
			ring := NewRing(nodeIDs(tc.nodes), 0)
			rng := rand.New(rand.NewPCG(1, 2))
			loads := map[string]int64{}
			load := func(id string) int64 { return loads[id] }
			const reqs = 2000
			hot := HashString("the same system prompt")
			for i := 1; i <= reqs; i++ {
				key := hot
				if rng.Float64() >= tc.hot {
					key = rng.Uint64()
				}
				loads[ring.Pick(key, load, tc.c)]++
				// The bound holds after every step, not just at the end.
				limit := Bound(int64(i-1), tc.nodes, tc.c)
				for id, l := range loads {
					if l > limit {
						t.Fatalf("after %d requests %s carries %d > ⌈c·avg⌉ = %d", i, id, l, limit)
					}
				}
			}
			t.Logf("loads %v (bound %d)", loads, Bound(reqs-1, tc.nodes, tc.c))
		})
	}
}

// TestRingAgreesAcrossFrontends: the order of nodes given does not matter,
// and an idle ring sends a key to the same node every time.
func TestRingAgreesAcrossFrontends(t *testing.T) {
	a := NewRing([]string{"x", "y", "z", "w"}, 0)
	b := NewRing([]string{"w", "z", "y", "x", "y"}, 0)
	for k := range 1000 {
		key := HashString(fmt.Sprint(k))
		if pa, pb := a.Order(key, noLoad, 1.25), b.Order(key, noLoad, 1.25); fmt.Sprint(pa) != fmt.Sprint(pb) || len(pa) != 4 {
			t.Fatalf("key %d: %v vs %v", k, pa, pb)
		}
	}
}

func TestPrefixChain(t *testing.T) {
	base := []byte("You are a helpful assistant. The user asks about the weather in Paris today.")
	same := PrefixChain("m", base, 1024, 16)
	if again := PrefixChain("m", base, 1024, 16); fmt.Sprint(again) != fmt.Sprint(same) {
		t.Fatal("not deterministic")
	}
	if len(same) != (len(base)+15)/16 {
		t.Fatalf("%d hashes for %d bytes in chunks of 16", len(same), len(base))
	}
	// A change in chunk 2 keeps hashes 0..1 and changes every later one.
	changed := append([]byte(nil), base...)
	changed[40] = 'X'
	other := PrefixChain("m", changed, 1024, 16)
	for i := range same {
		if (i < 2) != (same[i] == other[i]) {
			t.Errorf("hash %d: equal=%v", i, same[i] == other[i])
		}
	}
	// Past the limit nothing counts; another model is another key.
	if a, b := PrefixChain("m", base, 32, 16), PrefixChain("m", changed, 32, 16); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("a change past maxBytes changed the chain")
	}
	if PrefixChain("m2", base, 1024, 16)[0] == same[0] {
		t.Error("the model is not part of the key")
	}
}
