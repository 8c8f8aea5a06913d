package grammar

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"fusion/engine/sample"
	"fusion/engine/tokenizer"
	"fusion/internal/testenv"
)

var qwenOnce struct {
	sync.Once
	v   *Vocab
	err error
}

// byteLevelInverse maps the runes of the byte-level alphabet (GPT-2's
// bytes_to_unicode) back to bytes.
func byteLevelInverse() map[rune]byte {
	inv := map[rune]byte{}
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			inv[rune(b)] = byte(b)
		} else {
			inv[next] = byte(b)
			next++
		}
	}
	return inv
}

// qwenVocab loads the Qwen3 vocabulary as raw token bytes. The tokenizer
// package has no raw-bytes accessor (Decode replaces invalid UTF-8), so the
// byte-level token strings from Token are mapped back to bytes here; special
// tokens are left empty and EOS ids come from the tokenizer. The fixture is
// found like every other (testenv): a missing one fails under `make test`.
func qwenVocab(tb testing.TB) *Vocab {
	tb.Helper()
	qwenDir := testenv.TokenizerDir(tb, "qwen3")
	qwenOnce.Do(func() {
		tok, err := tokenizer.Load(qwenDir)
		if err != nil {
			qwenOnce.err = err
			return
		}
		inv := byteLevelInverse()
		toks := make([][]byte, tok.VocabSize())
		for id := range toks {
			s, ok := tok.Token(id)
			if !ok || tok.IsSpecial(id) {
				continue
			}
			var raw []byte
			for _, r := range s {
				b, ok := inv[r]
				if !ok {
					raw = []byte(s) // an added token written as plain text
					break
				}
				raw = append(raw, b)
			}
			toks[id] = raw
		}
		qwenOnce.v = NewVocab(toks, tok.EOS())
	})
	if qwenOnce.err != nil {
		tb.Fatal(qwenOnce.err)
	}
	return qwenOnce.v
}

var benchSchemas = []struct{ name, schema string }{
	{"small", `{"type":"object","properties":{"answer":{"type":"string"},"confidence":{"type":"number"}},"required":["answer","confidence"],"additionalProperties":false}`},
	{"medium", worstSchemas[31]},
	{"large", `{"$defs":{"addr":{"type":"object","properties":{"street":{"type":"string","maxLength":64},"city":{"type":"string"},"zip":{"type":"string","minLength":5,"maxLength":10},"country":{"enum":["US","DE","FR","JP"]}},"required":["street","city","country"],"additionalProperties":false},"person":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"email":{"type":["string","null"]},"address":{"$ref":"#/$defs/addr"},"friends":{"type":"array","items":{"$ref":"#/$defs/person"},"maxItems":3},"tags":{"type":"array","items":{"type":"string"}},"active":{"type":"boolean"}},"required":["name","age","address"],"additionalProperties":false}},"type":"object","properties":{"people":{"type":"array","items":{"$ref":"#/$defs/person"},"minItems":1},"total":{"type":"integer"},"meta":{"type":"object"}},"required":["people","total"],"additionalProperties":false}`},
}

// TestQwenMaskLatency samples random generations over the real Qwen3
// vocabulary and reports per-token Mask latency percentiles.
func TestQwenMaskLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	start := time.Now()
	v := qwenVocab(t)
	t.Logf("vocab: %d ids, trie built in %v (with tokenizer load)", v.Size(), time.Since(start))
	rng := rand.New(rand.NewPCG(3, 4))
	mask := sample.NewBitset(v.Size())
	for _, bs := range benchSchemas {
		t0 := time.Now()
		g, err := Compile([]byte(bs.schema))
		if err != nil {
			t.Fatal(err)
		}
		compile := time.Since(t0)
		var lat []time.Duration
		var allowed []int
		for gen := 0; gen < 3; gen++ {
			m := g.NewMatcher()
			for steps := 0; !m.Ended() && steps < 300; steps++ {
				t1 := time.Now()
				m.Mask(v, mask)
				lat = append(lat, time.Since(t1))
				allowed = allowed[:0]
				for id := range v.Size() {
					if mask.Allowed(id) {
						allowed = append(allowed, id)
					}
				}
				if len(allowed) == 0 {
					t.Fatalf("%s: dead end", bs.name)
				}
				if err := m.Accept(v, allowed[rng.IntN(len(allowed))]); err != nil {
					t.Fatal(err)
				}
			}
		}
		slices.Sort(lat)
		t.Logf("%-6s compile %v; Mask over %d steps: p50 %v p99 %v max %v", bs.name, compile,
			len(lat), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	}
}

func BenchmarkQwenMask(b *testing.B) {
	v := qwenVocab(b)
	g, err := Compile([]byte(benchSchemas[0].schema))
	if err != nil {
		b.Fatal(err)
	}
	mask := sample.NewBitset(v.Size())
	for _, c := range []struct{ name, prefix string }{
		{"start", ``},
		{"key", `{"answer":"x",`},
		{"string", `{"answer":"hello`},
		{"number", `{"answer":"x","confidence":0.`},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := g.NewMatcher()
			if _, ok := m.AdvanceBytes([]byte(c.prefix)); !ok {
				b.Fatal("prefix rejected")
			}
			for b.Loop() {
				m.Mask(v, mask)
			}
		})
	}
}

func BenchmarkCompile(b *testing.B) {
	for _, bs := range benchSchemas {
		b.Run(bs.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Compile([]byte(bs.schema)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
