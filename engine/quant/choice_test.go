package quant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/model"
)

// TestArithmeticChoices: the generated set is fixed (a shorter set is the
// longer one's start), bounded, and every question has four distinct
// options of which exactly the marked one is the exact answer.
func TestArithmeticChoices(t *testing.T) {
	long := ArithmeticChoices(200)
	if len(long) != 200 || !reflect.DeepEqual(ArithmeticChoices(7), long[:7]) || !reflect.DeepEqual(ArithmeticChoices(200), long) {
		t.Fatalf("the set is not fixed")
	}
	if len(ArithmeticChoices(-1)) != 0 || len(ArithmeticChoices(MaxChoices+5)) != MaxChoices {
		t.Errorf("bounds")
	}
	pos := map[int]int{}
	for i, q := range long {
		var a, b int
		var op string
		if _, err := fmt.Sscanf(q.Context, "Question: What is %d %s %d?\nAnswer:", &a, &op, &b); err != nil {
			t.Fatalf("question %d %q: %v", i, q.Context, err)
		}
		want := map[string]int{"+": a + b, "-": a - b, "*": a * b}[op]
		seen := map[string]bool{}
		for k, o := range q.Options {
			var v int
			if _, err := fmt.Sscanf(o, " %d", &v); err != nil || o[0] != ' ' {
				t.Fatalf("question %d option %q", i, o)
			}
			if (v == want) != (k == q.Answer) || seen[o] {
				t.Errorf("question %d %q: options %q, answer %d", i, q.Context, q.Options, q.Answer)
			}
			seen[o] = true
		}
		if len(q.Options) != 4 {
			t.Errorf("question %d: %d options", i, len(q.Options))
		}
		pos[q.Answer]++
	}
	if len(pos) != 4 {
		t.Errorf("the answer sits only at %v", pos)
	}
}

// TestMultipleChoiceLogLikelihood: an option's log-likelihood equals the
// difference of Perplexity's summed NLLs of the context alone and of
// context+option (the same tokens scored by another path), and
// MultipleChoice counts the questions whose answer scores highest.
func TestMultipleChoiceLogLikelihood(t *testing.T) {
	ctx := context.Background()
	dir := demoDir(t, demo.Options{})
	qs := ArithmeticChoices(2)
	tok, err := loadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := model.Load(ctx, dir, be, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sum := func(text string) float64 {
		s, err := Perplexity(ctx, dir, text, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s.NLL * float64(s.Tokens)
	}
	correct := 0
	for qi, q := range qs {
		lls, err := optionLogLikelihoods(ctx, m, tok, q)
		if err != nil {
			t.Fatal(err)
		}
		base, best := sum(q.Context), 0
		for oi, o := range q.Options {
			want := base - sum(q.Context+o)
			if math.Abs(lls[oi]-want) > 1e-4*max(1, math.Abs(want)) || lls[oi] >= 0 {
				t.Errorf("question %d option %q: log-likelihood %.6f, via Perplexity %.6f", qi, o, lls[oi], want)
			}
			if want > base-sum(q.Context+q.Options[best]) {
				best = oi
			}
		}
		if best == q.Answer {
			correct++
		}
		t.Logf("question %d %q %q (answer %d): %.4f", qi, q.Context, q.Options, q.Answer, lls)
	}
	got, err := MultipleChoice(ctx, dir, qs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Questions != 2 || got.Correct != correct || got.Accuracy != float64(correct)/2 {
		t.Errorf("MultipleChoice %+v, want %d of 2 right", got, correct)
	}
	bad := []Choice{{Context: "Question: x\nAnswer:", Options: []string{" 1"}, Answer: 1}}
	if _, err := MultipleChoice(ctx, dir, bad, nil); !errors.Is(err, ErrBadOptions) {
		t.Errorf("an answer past the options: %v", err)
	}
	if _, err := MultipleChoice(ctx, dir, nil, nil); !errors.Is(err, ErrBadOptions) {
		t.Errorf("no questions: %v", err)
	}
}
