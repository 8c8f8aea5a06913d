package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"fusion/engine/grammar"
	"fusion/engine/sample"
	"fusion/engine/tokenizer"
)

// grammarBenchSchemas are three schemas of increasing size: a small
// object, a tool's parameters, and a large nested document with $defs and
// recursion.
var grammarBenchSchemas = []struct{ name, schema string }{
	{"small", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`},
	{"medium", `{"type":"object","properties":{"city":{"type":"string","maxLength":40},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},"hours":{"type":"array","items":{"type":"integer","minimum":0,"maximum":23},"maxItems":24},"when":{"type":"string","format":"date"},"detail":{"type":"boolean"}},"required":["city","unit","days"],"additionalProperties":false}`},
	{"large", `{"$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"},"country":{"enum":["FR","DE","US","JP"]}},"required":["street","city","country"],"additionalProperties":false},"person":{"type":"object","properties":{"name":{"type":"string","maxLength":64},"email":{"type":"string","format":"email"},"age":{"type":"integer","minimum":0,"maximum":150},"address":{"$ref":"#/$defs/address"},"tags":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":8},"manager":{"anyOf":[{"$ref":"#/$defs/person"},{"type":"null"}]}},"required":["name","email","address"],"additionalProperties":false}},"type":"object","properties":{"id":{"type":"string","format":"uuid"},"created":{"type":"string","format":"date-time"},"owner":{"$ref":"#/$defs/person"},"members":{"type":"array","items":{"$ref":"#/$defs/person"},"maxItems":5},"status":{"oneOf":[{"const":"open"},{"const":"closed"},{"type":"object","properties":{"code":{"type":"integer"},"reason":{"type":"string"}},"required":["code"]}]},"score":{"type":"number","minimum":0,"maximum":100},"meta":{"type":"object","additionalProperties":{"type":"string"}}},"required":["id","created","owner","members","status"],"additionalProperties":false}`},
}

type grammarBenchResult struct {
	SchemaBytes int     `json:"schema_bytes"`
	CompileUs   float64 `json:"compile_us"`
	Masks       int     `json:"masks"`
	P50Us       float64 `json:"mask_p50_us"`
	P99Us       float64 `json:"mask_p99_us"`
	MeanUs      float64 `json:"mask_mean_us"`
	// Under a token budget (max_tokens near), Mask also checks that each
	// token leaves the document finishable.
	BudgetP50Us float64 `json:"budget_mask_p50_us"`
	BudgetP99Us float64 `json:"budget_mask_p99_us"`
}

// GrammarOptions are the settings of the grammar benchmark.
type GrammarOptions struct {
	Walks int // random walks per schema
	Steps int // tokens per walk at most
}

// DefaultGrammarOptions are the settings `make bench` uses.
func DefaultGrammarOptions() GrammarOptions { return GrammarOptions{Walks: 8, Steps: 120} }

// Grammar times schema compilation and the per-token mask over the
// Qwen3 vocabulary (151,936 ids) along random walks through the grammar
// (tokens drawn uniformly from the allowed set), and prints one JSON
// object.
func Grammar(ctx context.Context, o GrammarOptions, stdout io.Writer) error {
	tok, err := tokenizer.Load(filepath.Join(fixturesDir(), "tokenizers", "qwen3"))
	if err != nil {
		return json.NewEncoder(stdout).Encode(map[string]string{"error": fmt.Sprintf("qwen3 tokenizer fixture: %v", err)})
	}
	tokens := make([][]byte, tok.VocabSize())
	for id := range tokens {
		if tok.IsSpecial(id) {
			continue
		}
		if b, ok := tok.TokenBytes(id); ok && len(b) > 0 {
			tokens[id] = b
		}
	}
	start := time.Now()
	vocab := grammar.NewVocab(tokens, tok.EOS())
	out := map[string]any{"vocab_size": len(tokens), "vocab_build_ms": float64(time.Since(start).Microseconds()) / 1000}
	for _, s := range grammarBenchSchemas {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res, err := benchOneGrammar(vocab, s.schema, o.Walks, o.Steps)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		out[s.name] = res
	}
	return json.NewEncoder(stdout).Encode(out)
}

func benchOneGrammar(v *grammar.Vocab, schema string, walks, steps int) (grammarBenchResult, error) {
	res := grammarBenchResult{SchemaBytes: len(schema)}
	const compiles = 20
	start := time.Now()
	var g *grammar.Grammar
	for range compiles {
		var err error
		if g, err = grammar.Compile([]byte(schema)); err != nil {
			return res, err
		}
	}
	res.CompileUs = float64(time.Since(start).Microseconds()) / compiles
	rng := rand.New(rand.NewPCG(1, 2))
	mask := sample.NewBitset(v.Size())
	var plain, budget []float64
	for w := range walks {
		withBudget := w%2 == 1
		m := g.NewMatcher()
		left := m.Remaining() + 32
		var allowed []int
		for i := 0; i < steps && !m.Ended(); i++ {
			if withBudget {
				m.SetBudget(left - i)
			}
			t0 := time.Now()
			m.Mask(v, mask)
			us := float64(time.Since(t0).Nanoseconds()) / 1000
			if withBudget {
				budget = append(budget, us)
			} else {
				plain = append(plain, us)
			}
			allowed = allowed[:0]
			for id := range v.Size() {
				if mask.Allowed(id) {
					allowed = append(allowed, id)
				}
			}
			if len(allowed) == 0 {
				return res, fmt.Errorf("dead end after %d tokens", i)
			}
			if err := m.Accept(v, allowed[rng.IntN(len(allowed))]); err != nil {
				return res, err
			}
		}
	}
	res.Masks = len(plain) + len(budget)
	res.P50Us, res.P99Us, res.MeanUs = percentiles(plain)
	res.BudgetP50Us, res.BudgetP99Us, _ = percentiles(budget)
	return res, nil
}

func percentiles(xs []float64) (p50, p99, mean float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)], sum / float64(len(s))
}
