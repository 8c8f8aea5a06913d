package piper

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/internal/testenv"
)

// joeSentences are phonemized by us and by piper-tts; the ids must be
// identical. They cover clause punctuation (, ; : . ? !), abbreviations,
// numbers, quotes, an ellipsis, text without a final stop, and the
// linking "ʲ" newer espeak-ng writes between an i-vowel and a vowel.
var joeSentences = []string{
	"Hello, world. How are you today?",
	"The quick brown fox jumps over the lazy dog!",
	"It's 42 degrees; Dr. Smith said: wow.",
	"Please call Stella and ask her to bring these things with her from the store.",
	"Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her brother Bob.",
	"We also need a small plastic snake and a big toy frog for the kids.",
	"When the sunlight strikes raindrops in the air, they act as a prism and form a rainbow.",
	"Is this the right way to the museum? I think so!",
	"My phone number is 555-0199, and the meeting starts at 3:30 pm.",
	"\"Quoted speech,\" she said, \"is tricky.\"",
	"Mr. Jones paid 3.5 dollars, e.g. cash",
	"The only idea: a piano, seeing the city of lights\nand a busy office.",
	"Wait... is it over",
	"I met the dr. yesterday. Go! then",
}

func joeConfig(t *testing.T) (*Config, string) {
	t.Helper()
	dir := testenv.PiperVoiceDir(t, "piper-joe-medium")
	c, err := LoadConfig(filepath.Join(dir, "en_US-joe-medium.onnx.json"))
	if err != nil {
		t.Fatal(err)
	}
	return c, dir
}

// referencePython returns the interpreter with piper-tts and the
// directory holding the espeak-ng data piper-tts bundles.
func referencePython(t *testing.T) (py, espeakData string) {
	t.Helper()
	py = testenv.Python(t)
	out, err := exec.Command(py, "-c", "from piper.phonemize_espeak import ESPEAK_DATA_DIR; print(ESPEAK_DATA_DIR.parent)").CombinedOutput()
	if err != nil {
		if testenv.Required() {
			t.Fatalf("piper-tts (scripts/requirements-test.txt) missing: %v\n%s", err, out)
		}
		t.Skipf("piper-tts missing: %v", err)
	}
	return py, strings.TrimSpace(string(out))
}

// TestPhonemeIDsMatchPiper compares the ids of every sentence with
// piper-tts 1.8.0's PiperVoice.phonemize + phonemes_to_ids. espeak-ng runs
// with the dictionary piper-tts bundles (--path), so that the test checks
// our clause handling, linking and id mapping rather than two dictionary
// versions.
func TestPhonemeIDsMatchPiper(t *testing.T) {
	if _, err := exec.LookPath("espeak-ng"); err != nil {
		if testenv.Required() {
			t.Fatal("espeak-ng missing (scripts/test-deps.sh installs it)")
		}
		t.Skip("espeak-ng missing")
	}
	c, dir := joeConfig(t)
	py, data := referencePython(t)
	script := `
import json, sys
from piper import PiperVoice
v = PiperVoice.load(sys.argv[1])
print(json.dumps([[v.phonemes_to_ids(s) for s in v.phonemize(t)] for t in json.loads(sys.argv[2])]))
`
	in, _ := json.Marshal(joeSentences)
	out, err := exec.Command(py, "-c", script, filepath.Join(dir, "en_US-joe-medium.onnx"), string(in)).Output()
	if err != nil {
		t.Fatalf("piper-tts: %v", err)
	}
	var want [][][]int64
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	e := Espeak{DataDir: data}
	for i, text := range joeSentences {
		sents, err := e.Phonemize(context.Background(), c.Espeak.Voice, text)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]int64
		for _, s := range sents {
			ids, missing := c.IDs(s)
			if len(missing) > 0 {
				t.Errorf("%q: phonemes missing from the map: %q", text, missing)
			}
			got = append(got, ids)
		}
		if !slices.EqualFunc(got, want[i], slices.Equal) {
			t.Errorf("%q:\n got %v\nwant %v\nphonemes %q", text, got, want[i], sents)
		}
	}
}

func TestClauseEnds(t *testing.T) {
	cases := []struct {
		text string
		want []clauseEnd
	}{
		{"Hello, world. How?", []clauseEnd{{",", false}, {".", true}, {"?", true}}},
		{"a 3.5 b", nil},
		{"Wait... what?! No", []clauseEnd{{"", false}, {"?", true}}},
		{"\"Yes,\" she said.", []clauseEnd{{",", false}, {".", true}}},
		{"a: b; c!", []clauseEnd{{":", false}, {";", false}, {"!", true}}},
		{"I met the dr. yesterday. Go! then", []clauseEnd{{".", true}, {"!", true}}},
	}
	for _, tc := range cases {
		if got := clauseEnds(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("clauseEnds(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestLinkI(t *testing.T) {
	cases := map[string]string{
		"ðɪ ˈɛnd":      "ðɪʲ ˈɛnd",
		"sˈiːɪŋ":       "sˈiːʲɪŋ",
		"piˈænoʊ":      "piʲˈænoʊ",
		"aɪdˈiə":       "aɪdˈiə",
		"aɪ æm":        "aɪ æm",
		"lˈeɪzi dˈɑːɡ": "lˈeɪzi dˈɑːɡ",
		"mˈeɪbiː ɐ":    "mˈeɪbiːʲ ɐ",
		"hˈæpi":        "hˈæpi",
	}
	for in, want := range cases {
		if got := linkI(in); got != want {
			t.Errorf("linkI(%q) = %q, want %q", in, got, want)
		}
	}
}
