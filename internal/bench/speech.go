package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/piper"
)

//go:embed piper_bench.py
var piperBenchScript string

// SpeechOptions are the settings of the text-to-speech benchmark.
type SpeechOptions struct {
	Voice      string // Piper voice directory ("": the piper-joe-medium fixture)
	Text       string // the passage spoken ("": benchPassage, eight sentences)
	Threads    int    // compute threads on both sides (0: all cores)
	Repeat     int    // timed syntheses on each side, after a warm-up; the fastest counts
	MLX        bool   // also time the MLX backend when libmlxc is available (slow on MLX's CPU device: off in make bench)
	CPUProfile string // file for a CPU profile of our CPU backend's timed runs
}

// DefaultSpeechOptions are the settings `make bench` uses.
func DefaultSpeechOptions() SpeechOptions { return SpeechOptions{Repeat: 1} }

type speechSide struct {
	Seconds      float64 `json:"seconds,omitempty"`
	AudioSPerS   float64 `json:"audio_s_per_s,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
	MaxDiffLSB   int     `json:"max_diff_lsb_vs_piper_tts"` // -1: not compared, or the lengths differ
	SameSentence bool    `json:"same_sentence_lengths"`
	Error        string  `json:"error,omitempty"`
}

type speechBenchResult struct {
	Voice        string      `json:"voice"`
	Sentences    int         `json:"sentences"`
	AudioSeconds float64     `json:"audio_seconds"`
	Threads      int         `json:"threads"`
	Kernels      string      `json:"kernels,omitempty"`
	CPU          *speechSide `json:"fusion_cpu"`
	MLX          *speechSide `json:"fusion_mlx,omitempty"`
	RefSeconds   float64     `json:"piper_tts_seconds,omitempty"`
	RefRTF       float64     `json:"piper_tts_audio_s_per_s,omitempty"`
	OnnxRuntime  string      `json:"onnxruntime,omitempty"`
	Note         string      `json:"note"`
	Error        string      `json:"error,omitempty"`
}

// Speech measures text-to-speech speed: a Piper voice speaks a passage on
// the CPU backend (and on MLX when available) against piper-tts
// (onnxruntime, pinned to the same intra-op thread count, one inter-op
// thread) in the same run. Both sides do the whole of a request's work:
// espeak-ng phonemization (with piper-tts's bundled espeak-ng data on
// both, so that the phonemes and hence the lengths are the same), the
// VITS graph per sentence, peak normalization, 16-bit samples. The noise
// scales are 0 on both sides so the waveforms can be compared: the
// result gives the largest sample difference. The figure is the
// real-time factor as seconds of audio per second of wall time (loading
// and a warm-up excluded); ratio = fusion / piper-tts, above 1 is faster.
func Speech(ctx context.Context, o SpeechOptions, stdout, stderr io.Writer) error {
	if o.Repeat < 1 || o.Threads < 0 {
		return optionErrorf("-repeat must be positive, -threads not negative")
	}
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	text := o.Text
	if text == "" {
		text = benchPassage
	}
	dir := o.Voice
	if dir == "" {
		dir = filepath.Join(fixturesDir(), "models", "piper-joe-medium")
	}
	enc := json.NewEncoder(stdout)
	res := &speechBenchResult{Voice: dir, Threads: threads,
		Note: "audio seconds per wall second of PiperVoice.synthesize-equivalent work (phonemization, graph, peak normalization, 16-bit samples), noise scales 0, loading and a warm-up excluded, best of -repeat; ratio = fusion / piper-tts"}
	model, err := voiceModel(dir)
	if err != nil {
		res.Error = err.Error()
		return enc.Encode(res)
	}
	py := pythonPath()
	out, err := exec.CommandContext(ctx, py, "-c", "from piper.phonemize_espeak import ESPEAK_DATA_DIR; print(ESPEAK_DATA_DIR.parent)").Output()
	if err != nil {
		res.Error = fmt.Sprintf("piper-tts: %v (run `make test-deps`)", err)
		return enc.Encode(res)
	}
	espeak := piper.Espeak{DataDir: strings.TrimSpace(string(out))}
	cfg, err := piper.LoadConfig(model + ".json")
	if err != nil {
		res.Error = err.Error()
		return enc.Encode(res)
	}
	rate := float64(cfg.Audio.SampleRate)

	// piper-tts first: its samples are what ours are compared with.
	fmt.Fprintf(stderr, "bench speech: piper-tts\n")
	ref, refErr := runPiperTTS(ctx, py, model, text, threads, o.Repeat)
	if refErr != nil {
		res.Error = refErr.Error() // our side is still measured
	} else {
		res.RefSeconds, res.OnnxRuntime = ref.Seconds, ref.ORT
		res.Sentences = len(ref.Sentences)
		res.AudioSeconds = float64(len(ref.samples)) / rate
		res.RefRTF = res.AudioSeconds / ref.Seconds
	}

	cb := cpu.New(cpu.Options{Threads: threads})
	res.Kernels = cb.Kernels().Level().String()
	fmt.Fprintf(stderr, "bench speech: fusion cpu\n")
	res.CPU = speakSide(ctx, cb, dir, espeak, text, o.Repeat, o.CPUProfile, ref)
	if o.MLX {
		fmt.Fprintf(stderr, "bench speech: fusion mlx\n")
		if mb, err := newMLXBackend(); err != nil {
			res.MLX = &speechSide{Error: fmt.Sprintf("mlx backend: %v", err)}
		} else {
			res.MLX = speakSide(ctx, mb, dir, espeak, text, o.Repeat, "", ref)
		}
	}
	for _, s := range []*speechSide{res.CPU, res.MLX} {
		if s != nil && s.AudioSPerS > 0 && res.RefRTF > 0 {
			s.Ratio = s.AudioSPerS / res.RefRTF
		}
	}
	return enc.Encode(res)
}

// voiceModel is the one *.onnx file of a voice directory.
func voiceModel(dir string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if err != nil || len(m) != 1 {
		return "", fmt.Errorf("voice %s: want one *.onnx file, found %d (run `make test-deps`)", dir, len(m))
	}
	return m[0], nil
}

// speakSide loads the voice on be (which it closes), speaks text once to
// warm up and then repeat times, and compares the last run's samples with
// piper-tts's when ref is not nil. Each side's real-time factor counts
// the audio it spoke itself.
func speakSide(ctx context.Context, be backend.Backend, dir string, e piper.Espeak, text string, repeat int, profile string, ref *piperRef) *speechSide {
	defer be.Close()
	side := &speechSide{MaxDiffLSB: -1}
	v, err := piper.Load(ctx, dir, be)
	if err != nil {
		side.Error = fmt.Sprintf("voice: %v", err)
		return side
	}
	defer v.Close()
	speak := func() ([][]int16, error) {
		var out [][]int16
		err := v.Speak(ctx, e, text, piper.Scales{Length: 1}, nil, func(s piper.Sentence) error {
			out = append(out, piper.PCM16(s.Samples))
			return nil
		})
		return out, err
	}
	if _, err := speak(); err != nil { // warm-up
		side.Error = err.Error()
		return side
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			side.Error = err.Error()
			return side
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			side.Error = err.Error()
			return side
		}
		defer pprof.StopCPUProfile()
	}
	best := time.Duration(math.MaxInt64)
	var sents [][]int16
	for range repeat {
		start := time.Now()
		if sents, err = speak(); err != nil {
			side.Error = err.Error()
			return side
		}
		best = min(best, time.Since(start))
	}
	n := 0
	for _, s := range sents {
		n += len(s)
	}
	side.Seconds = best.Seconds()
	side.AudioSPerS = float64(n) / float64(v.Config.Audio.SampleRate) / side.Seconds
	if ref != nil {
		side.SameSentence, side.MaxDiffLSB = compareSentences(sents, ref)
	}
	return side
}

// compareSentences says whether ours has piper-tts's sentence lengths and,
// if so, the largest sample difference in LSB (-1 when the lengths differ).
func compareSentences(ours [][]int16, ref *piperRef) (bool, int) {
	if len(ours) != len(ref.Sentences) {
		return false, -1
	}
	worst, off := 0, 0
	for i, s := range ours {
		if len(s) != ref.Sentences[i] {
			return false, -1
		}
		for j, x := range s {
			d := int(x) - int(ref.samples[off+j])
			worst = max(worst, d, -d)
		}
		off += len(s)
	}
	return true, worst
}

type piperRef struct {
	Seconds   float64 `json:"seconds"`
	Sentences []int   `json:"sentences"`
	ORT       string  `json:"onnxruntime"`
	samples   []int16
}

// runPiperTTS runs piper_bench.py and reads back its samples.
func runPiperTTS(ctx context.Context, py, model, text string, threads, repeat int) (*piperRef, error) {
	tmp, err := os.MkdirTemp("", "fusion-bench-speech-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	path := filepath.Join(tmp, "speech.s16")
	var stderrBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, py, "-c", piperBenchScript, model, text, strconv.Itoa(threads), strconv.Itoa(repeat), path)
	cmd.Stderr = &stderrBuf
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("piper-tts: %w: %s", err, stderrBuf.String())
	}
	var ref piperRef
	if err := json.Unmarshal(out, &ref); err != nil {
		return nil, fmt.Errorf("piper-tts output: %w: %s", err, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ref.samples = make([]int16, len(raw)/2)
	for i := range ref.samples {
		ref.samples[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	total := 0
	for _, n := range ref.Sentences {
		total += n
	}
	if total != len(ref.samples) {
		return nil, fmt.Errorf("piper-tts: %d samples written, its sentences sum to %d", len(ref.samples), total)
	}
	return &ref, nil
}
