package audio

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"fusion/engine/audio/audiotest"
	"fusion/internal/testenv"
)

// needFFmpeg returns ffmpeg's path; without it the test fails under
// FUSION_REQUIRE_FIXTURES=1 (make test installs it) and skips otherwise.
func needFFmpeg(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("ffmpeg")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("ffmpeg not found on PATH: %v", err)
		}
		t.Skipf("ffmpeg not found on PATH (scripts/test-deps.sh installs it): %v", err)
	}
	return p
}

// testSignal is a deterministic multi-channel test signal: per channel a
// different tone plus a little noise, peak below 0.9.
func testSignal(rate, channels int, seconds float64) []float64 {
	r := rand.New(rand.NewPCG(uint64(rate), uint64(channels)))
	n := int(float64(rate) * seconds)
	out := make([]float64, n*channels)
	for i := range n {
		t := float64(i) / float64(rate)
		for c := range channels {
			f := 220 * float64(c+1)
			out[i*channels+c] = 0.6*math.Sin(2*math.Pi*f*t) + 0.2*(r.Float64()*2-1)
		}
	}
	return out
}

func f64le(x []float64) []byte {
	b := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[i*8:], math.Float64bits(v))
	}
	return b
}

// encode has ffmpeg encode raw float64 samples into a file with the given
// output arguments (codec, container) and returns the file's bytes.
func encode(t testing.TB, x []float64, rate, channels int, name string, args ...string) []byte {
	t.Helper()
	ff := needFFmpeg(t)
	dir := t.TempDir()
	raw := filepath.Join(dir, "in.f64")
	if err := os.WriteFile(raw, f64le(x), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := append([]string{"-nostdin", "-hide_banner", "-loglevel", "error", "-f", "f64le",
		"-ar", itoa(rate), "-ac", itoa(channels), "-i", raw}, args...)
	cmd = append(cmd, "-y", out)
	if b, err := exec.Command(ff, cmd...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %v: %v\n%s", cmd, err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ffmpegDecode is the reference decode: ffmpeg's float32 samples of a
// file at its own rate and channel count.
func ffmpegDecode(t testing.TB, data []byte, channels int) []float32 {
	t.Helper()
	ff := needFFmpeg(t)
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ff, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", in,
		"-f", "f32le", "-acodec", "pcm_f32le", "-ac", itoa(channels), "pipe:1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffmpeg decode: %v\n%s", err, stderr.String())
	}
	return audiotest.F32s(b)
}

func itoa(i int) string { return strconv.Itoa(i) }
