package quant

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"fusion/engine/backend/cpu"
	"fusion/engine/model"
	"fusion/engine/tokenizer"
)

// MaxChoices bounds the questions ArithmeticChoices makes.
const MaxChoices = 1000

// Choice is one multiple-choice question: a context and the options that
// may continue it, Answer the index of the right one; Topic, when not
// empty, groups it in ChoiceScore.Topics.
type Choice struct {
	Context string   `json:"context"`
	Options []string `json:"options"`
	Answer  int      `json:"answer"`
	Topic   string   `json:"topic,omitempty"`
}

// ChoiceScore is a model's accuracy on multiple-choice questions.
type ChoiceScore struct {
	Questions int     `json:"questions"`
	Correct   int     `json:"correct"`
	Accuracy  float64 `json:"accuracy"` // Correct / Questions
	// Topics are the counts per topic, when the questions have topics.
	Topics map[string]TopicScore `json:"topics,omitempty"`
}

// TopicScore is the questions of one topic and how many were right.
type TopicScore struct {
	Questions int `json:"questions"`
	Correct   int `json:"correct"`
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
// do (its acc): ChoiceLogLikelihoods, and a question is correct when its
// answer is Pick's. progress, when not nil, is called after each question
// with the number done.
func MultipleChoice(ctx context.Context, dir string, qs []Choice, progress func(done int)) (ChoiceScore, error) {
	lls, err := ChoiceLogLikelihoods(ctx, dir, qs, progress)
	if err != nil {
		return ChoiceScore{}, err
	}
	return Tally(qs, lls), nil
}

// Tally counts the questions whose answer is Pick of their options'
// log-likelihoods lls (one slice per question), per topic too.
func Tally(qs []Choice, lls [][]float64) ChoiceScore {
	res := ChoiceScore{Questions: len(qs)}
	for qi, q := range qs {
		right := Pick(lls[qi]) == q.Answer
		if right {
			res.Correct++
		}
		if q.Topic != "" {
			if res.Topics == nil {
				res.Topics = map[string]TopicScore{}
			}
			t := res.Topics[q.Topic]
			t.Questions++
			if right {
				t.Correct++
			}
			res.Topics[q.Topic] = t
		}
	}
	if res.Questions > 0 {
		res.Accuracy = float64(res.Correct) / float64(res.Questions)
	}
	return res
}

// Pick is the option of highest log-likelihood, the first of equals.
func Pick(lls []float64) int {
	best := 0
	for i, ll := range lls {
		if ll > lls[best] {
			best = i
		}
	}
	return best
}

// ChoiceLogLikelihoods loads the model in dir (as Perplexity does, on the
// CPU backend) and returns each question's options' log-likelihoods: the
// sum of the option's continuation tokens' log-probabilities given the
// context (the tokens of context+option past those of the context
// alone). progress, when not nil, is called after each question with the
// number done.
func ChoiceLogLikelihoods(ctx context.Context, dir string, qs []Choice, progress func(done int)) ([][]float64, error) {
	if len(qs) == 0 {
		return nil, fmt.Errorf("%w: no questions", ErrBadOptions)
	}
	for qi, q := range qs {
		if q.Answer < 0 || q.Answer >= len(q.Options) {
			return nil, fmt.Errorf("%w: question %d's answer %d is not one of its %d options", ErrBadOptions, qi, q.Answer, len(q.Options))
		}
	}
	tok, err := loadTokenizer(dir)
	if err != nil {
		return nil, fmt.Errorf("quant: tokenizer: %w", err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := model.Load(ctx, dir, be, model.Options{})
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	defer m.Close()
	out := make([][]float64, len(qs))
	for qi, q := range qs {
		if out[qi], err = optionLogLikelihoods(ctx, m, tok, q); err != nil {
			return nil, fmt.Errorf("question %d: %w", qi, err)
		}
		if progress != nil {
			progress(qi + 1)
		}
	}
	return out, nil
}

// optionLogLikelihoods is the log-likelihood of each of q's options as a
// continuation of its context under m. One sequence serves every option:
// the tokens an option shares with the one before (the context, mostly)
// stay in its cache, so the context is run once (a model with recurrent
// layers, which cannot rewind, runs each option whole); logits are asked
// from the context's last token on only.
func optionLogLikelihoods(ctx context.Context, m *model.Model, tok *tokenizer.Tokenizer, q Choice) ([]float64, error) {
	vocab := m.Config.VocabSize
	nctx := len(tok.Encode(q.Context, true))
	all := make([][]int, len(q.Options))
	longest := 0
	for oi, opt := range q.Options {
		ids := tok.Encode(q.Context+opt, true)
		if len(ids) > MaxPerplexityTokens {
			return nil, fmt.Errorf("%w: option %d is %d tokens, over %d", ErrBadOptions, oi, len(ids), MaxPerplexityTokens)
		}
		if nctx < 1 || nctx >= len(ids) {
			return nil, fmt.Errorf("%w: option %d adds no token to its context", ErrBadOptions, oi)
		}
		all[oi], longest = ids, max(longest, len(ids))
	}
	seq, err := m.NewSequence(longest)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	defer seq.Close()
	var held []int // the tokens seq holds
	out := make([]float64, len(q.Options))
	for oi, ids := range all {
		// Keep what this option shares with the tokens held, up to the
		// context's last token, whose logits score the option's first.
		keep := 0
		for keep < min(len(held), nctx-1) && held[keep] == ids[keep] {
			keep++
		}
		logits, err := continuationLogits(ctx, m, seq, ids, keep, nctx-1)
		if errors.Is(err, model.ErrNoRewind) {
			logits, err = continuationLogits(ctx, m, seq, ids, 0, nctx-1)
		}
		if err != nil {
			return nil, fmt.Errorf("quant: %w", err)
		}
		held = ids
		for i := nctx - 1; i+1 < len(ids); i++ {
			row := i - (nctx - 1)
			out[oi] -= nll(logits[row*vocab:(row+1)*vocab], ids[i+1])
		}
	}
	return out, nil
}

// continuationLogits runs ids through seq, which keeps its first keep
// tokens (ids' own), and returns the logits of positions from on (keep <=
// from): the tokens before from run without logits.
func continuationLogits(ctx context.Context, m *model.Model, seq *model.Sequence, ids []int, keep, from int) ([]float32, error) {
	seq.Truncate(keep)
	if keep < from {
		if _, err := m.Forward(ctx, []model.Input{{Seq: seq, Tokens: ids[keep:from]}}, model.Range{}, nil); err != nil {
			return nil, err
		}
	}
	res, err := m.Forward(ctx, []model.Input{{Seq: seq, Tokens: ids[from:], AllLogits: true}}, model.Range{}, nil)
	if err != nil {
		return nil, err
	}
	return res.Logits[0], nil
}
