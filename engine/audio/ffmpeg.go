package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ffmpegTools resolves ffmpeg and ffprobe per Options.FFmpeg.
func ffmpegTools(format string, opts Options) (ffmpeg, ffprobe string, err error) {
	if opts.FFmpeg == "off" {
		return "", "", errorf(format, ErrNoFFmpeg, "decoding %s needs ffmpeg, which is disabled on this server", format)
	}
	name := opts.FFmpeg
	if name == "" {
		name = "ffmpeg"
	}
	ffmpeg, err = exec.LookPath(name)
	if err != nil {
		return "", "", errorf(format, ErrNoFFmpeg, "decoding %s needs ffmpeg (%v)", format, err)
	}
	ffprobe = filepath.Join(filepath.Dir(ffmpeg), "ffprobe")
	if _, err := os.Stat(ffprobe); err != nil {
		if ffprobe, err = exec.LookPath("ffprobe"); err != nil {
			return "", "", errorf(format, ErrNoFFmpeg, "decoding %s needs ffprobe next to ffmpeg (%v)", format, err)
		}
	}
	return ffmpeg, ffprobe, nil
}

// probe is the part of ffprobe's JSON we read.
type probe struct {
	Streams []struct {
		CodecName  string `json:"codec_name"`
		SampleRate string `json:"sample_rate"`
		Channels   int    `json:"channels"`
		Duration   string `json:"duration"`
	} `json:"streams"`
	Format struct {
		Duration string `json:"duration"`
	} `json:"format"`
}

// stderrTail keeps the last bytes a tool wrote on stderr, for the error.
type stderrTail struct{ b []byte }

func (s *stderrTail) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	if len(s.b) > 2048 {
		s.b = s.b[len(s.b)-2048:]
	}
	return len(p), nil
}

func (s *stderrTail) String() string {
	lines := strings.Split(strings.TrimSpace(string(s.b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// decodeFFmpeg decodes what has no Go decoder: ffprobe reads the first
// audio stream's rate, channels and (where the container states it)
// duration, then ffmpeg writes that stream as interleaved float32 at the
// same rate and channel count on its stdout, read up to the duration
// limit. Input goes in on stdin, except ISO BMFF (M4A/MP4), whose index
// may sit at the end of the file, out of reach of a pipe: that is written
// to a temporary file first.
func decodeFFmpeg(ctx context.Context, format string, data []byte, opts Options) (Signal, error) {
	ffmpeg, ffprobe, err := ffmpegTools(format, opts)
	if err != nil {
		return Signal{}, err
	}
	input := "pipe:0"
	if format == FormatMP4 {
		tmp, err := os.CreateTemp("", "fusion-audio-*.m4a")
		if err != nil {
			return Signal{}, fmt.Errorf("audio: temporary file for ffmpeg: %w", err)
		}
		defer os.Remove(tmp.Name())
		_, werr := tmp.Write(data)
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return Signal{}, fmt.Errorf("audio: temporary file for ffmpeg: %w", werr)
		}
		input = tmp.Name()
	}
	stdin := func() io.Reader {
		if input == "pipe:0" {
			return bytes.NewReader(data)
		}
		return nil
	}

	var p probe
	{
		var stdout bytes.Buffer
		var stderr stderrTail
		cmd := exec.CommandContext(ctx, ffprobe, "-v", "error", "-print_format", "json",
			"-show_streams", "-show_format", "-select_streams", "a:0", "-i", input)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin(), &stdout, &stderr
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return Signal{}, ctx.Err()
			}
			return Signal{}, errorf(format, ErrMalformed, "ffprobe: %s", stderr.String())
		}
		if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
			return Signal{}, fmt.Errorf("audio: reading ffprobe's output: %w", err)
		}
	}
	if len(p.Streams) == 0 {
		return Signal{}, errorf(format, ErrUnsupported, "the file has no audio stream")
	}
	st := p.Streams[0]
	rate, _ := strconv.Atoi(st.SampleRate)
	if err := opts.checkFormat(format, rate, st.Channels, -1); err != nil {
		return Signal{}, err
	}
	for _, d := range []string{st.Duration, p.Format.Duration} {
		if sec, err := strconv.ParseFloat(d, 64); err == nil && sec > 0 && !math.IsInf(sec, 0) {
			if err := opts.checkFrames(format, rate, st.Channels, int64(sec*float64(rate))); err != nil {
				return Signal{}, err
			}
			break
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stderr stderrTail
	cmd := exec.CommandContext(ctx, ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error",
		"-i", input, "-map", "0:a:0", "-vn", "-f", "f32le", "-acodec", "pcm_f32le",
		"-ac", strconv.Itoa(st.Channels), "-ar", strconv.Itoa(rate), "pipe:1")
	cmd.Stdin, cmd.Stderr = stdin(), &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Signal{}, fmt.Errorf("audio: ffmpeg: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return Signal{}, errorf(format, ErrNoFFmpeg, "starting ffmpeg: %v", err)
	}
	limit := min(opts.maxFrames(rate)*int64(st.Channels), opts.MaxSamples) * 4
	raw, rerr := io.ReadAll(io.LimitReader(stdout, limit+1))
	if int64(len(raw)) > limit {
		cancel()
		_ = cmd.Wait()
		return Signal{}, errorf(format, ErrTooLong, "more than %s of audio or %d samples (the limits)", opts.MaxDuration, opts.MaxSamples)
	}
	werr := cmd.Wait()
	if err := ctx.Err(); err != nil {
		return Signal{}, err
	}
	if rerr != nil {
		return Signal{}, fmt.Errorf("audio: reading ffmpeg's output: %w", rerr)
	}
	if werr != nil {
		var exit *exec.ExitError
		if errors.As(werr, &exit) {
			return Signal{}, errorf(format, ErrMalformed, "ffmpeg (%s): %s", st.CodecName, stderr.String())
		}
		return Signal{}, fmt.Errorf("audio: ffmpeg: %w", werr)
	}
	out := make([]float32, len(raw)/4/st.Channels*st.Channels)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[i*4:]))
	}
	return Signal{Rate: rate, Channels: st.Channels, Samples: out}, nil
}
