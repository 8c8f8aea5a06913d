package quant

import (
	"context"
	"fmt"
	"math/rand/v2"

	"fusion/engine/backend/cpu"
	"fusion/engine/model"
	"fusion/engine/tokenizer"
)

// MaxChoices bounds the questions ArithmeticChoices makes.
const MaxChoices = 1000

// Choice is one multiple-choice question: a context and the options that
// may continue it, Answer the index of the right one.
type Choice struct {
	Context string   `json:"context"`
	Options []string `json:"options"`
	Answer  int      `json:"answer"`
}

// ChoiceScore is a model's accuracy on multiple-choice questions.
type ChoiceScore struct {
	Questions int     `json:"questions"`
	Correct   int     `json:"correct"`
	Accuracy  float64 `json:"accuracy"` // Correct / Questions
}

// choiceSeed fixes the generated set: every run, node and model gets the
// same questions, so scores compare.
const choiceSeed = 23

// ArithmeticChoices returns the first n (at most MaxChoices) questions of
// a fixed generated set with exact answers: sums, differences and
// products of small numbers, each with four options (the answer and
// three near misses: off by one, two or ten) in a seeded order, in the
// "Question: …\nAnswer:" form lm-eval's tasks use, options starting with
// a space.
func ArithmeticChoices(n int) []Choice {
	n = min(max(n, 0), MaxChoices)
	rng := rand.New(rand.NewPCG(choiceSeed, 0))
	out := make([]Choice, n)
	for i := range out {
		var a, b, ans int
		var op string
		switch rng.IntN(3) {
		case 0:
			a, b, op = 2+rng.IntN(98), 2+rng.IntN(98), "+"
			ans = a + b
		case 1:
			a, b, op = 20+rng.IntN(80), 2+rng.IntN(18), "-"
			ans = a - b
		default:
			a, b, op = 2+rng.IntN(11), 2+rng.IntN(11), "*"
			ans = a * b
		}
		near := []int{ans + 1, ans - 1, ans + 2, ans - 2, ans + 10, ans - 10}
		rng.Shuffle(len(near), func(x, y int) { near[x], near[y] = near[y], near[x] })
		vals := append([]int{ans}, near[:3]...)
		rng.Shuffle(len(vals), func(x, y int) { vals[x], vals[y] = vals[y], vals[x] })
		q := Choice{Context: fmt.Sprintf("Question: What is %d %s %d?\nAnswer:", a, op, b)}
		for k, v := range vals {
			q.Options = append(q.Options, fmt.Sprintf(" %d", v))
			if v == ans {
				q.Answer = k
			}
		}
		out[i] = q
	}
	return out
}

// MultipleChoice loads the model in dir (as Perplexity does, on the CPU
// backend) and scores the questions as lm-eval's multiple-choice tasks
// do: each option's log-likelihood is the sum of its continuation tokens'
// log-probabilities given the context (the tokens of context+option past
// those of the context alone), and a question is correct when the right
// option's is the highest (the first of equals). progress, when not nil,
// is called after each question with the number done.
func MultipleChoice(ctx context.Context, dir string, qs []Choice, progress func(done int)) (ChoiceScore, error) {
	if len(qs) == 0 {
		return ChoiceScore{}, fmt.Errorf("%w: no questions", ErrBadOptions)
	}
	tok, err := loadTokenizer(dir)
	if err != nil {
		return ChoiceScore{}, fmt.Errorf("quant: tokenizer: %w", err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := model.Load(ctx, dir, be, model.Options{})
	if err != nil {
		return ChoiceScore{}, fmt.Errorf("quant: %w", err)
	}
	defer m.Close()
	res := ChoiceScore{Questions: len(qs)}
	for qi, q := range qs {
		if q.Answer < 0 || q.Answer >= len(q.Options) {
			return ChoiceScore{}, fmt.Errorf("%w: question %d's answer %d is not one of its %d options", ErrBadOptions, qi, q.Answer, len(q.Options))
		}
		lls, err := optionLogLikelihoods(ctx, m, tok, q)
		if err != nil {
			return ChoiceScore{}, fmt.Errorf("question %d: %w", qi, err)
		}
		best := 0
		for oi, ll := range lls {
			if ll > lls[best] {
				best = oi
			}
		}
		if best == q.Answer {
			res.Correct++
		}
		if progress != nil {
			progress(qi + 1)
		}
	}
	res.Accuracy = float64(res.Correct) / float64(res.Questions)
	return res, nil
}

// optionLogLikelihoods is the log-likelihood of each of q's options as a
// continuation of its context under m.
func optionLogLikelihoods(ctx context.Context, m *model.Model, tok *tokenizer.Tokenizer, q Choice) ([]float64, error) {
	vocab := m.Config.VocabSize
	nctx := len(tok.Encode(q.Context, true))
	out := make([]float64, len(q.Options))
	for oi, opt := range q.Options {
		ids := tok.Encode(q.Context+opt, true)
		if len(ids) > MaxPerplexityTokens {
			return nil, fmt.Errorf("%w: option %d is %d tokens, over %d", ErrBadOptions, oi, len(ids), MaxPerplexityTokens)
		}
		if nctx < 1 || nctx >= len(ids) {
			return nil, fmt.Errorf("%w: option %d adds no token to its context", ErrBadOptions, oi)
		}
		seq, err := m.NewSequence(len(ids))
		if err != nil {
			return nil, fmt.Errorf("quant: %w", err)
		}
		res, err := m.Forward(ctx, []model.Input{{Seq: seq, Tokens: ids, AllLogits: true}}, model.Range{}, nil)
		seq.Close()
		if err != nil {
			return nil, fmt.Errorf("quant: %w", err)
		}
		logits := res.Logits[0]
		for i := nctx - 1; i+1 < len(ids); i++ {
			out[oi] -= nll(logits[i*vocab:(i+1)*vocab], ids[i+1])
		}
	}
	return out, nil
}
