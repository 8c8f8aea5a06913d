// Package piper runs Piper text-to-speech voices: VITS models exported to
// ONNX with a JSON config (the layout of the voices Piper publishes, e.g.
// en_US-joe-medium.onnx and en_US-joe-medium.onnx.json).
//
// Text becomes speech in two stages. Phonemization (this file and
// phonemes.go) turns text into sentences of espeak-ng IPA phonemes and
// those into the voice's phoneme ids, exactly as piper-tts does; the VITS
// graph (text encoder, duration predictor, flow, HiFi-GAN decoder) turns
// one sentence's ids into samples at the voice's rate.
package piper

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Special phonemes of Piper's id maps.
const (
	Pad = "_" // after every phoneme
	BOS = "^" // first
	EOS = "$" // last
)

// MaxConfigSize caps the voice config read by LoadConfig.
const MaxConfigSize = 1 << 20

// Inference holds a voice's default synthesis scales.
type Inference struct {
	NoiseScale  float32 `json:"noise_scale"`  // the prior's noise (flow input)
	LengthScale float32 `json:"length_scale"` // > 1 speaks slower
	NoiseW      float32 `json:"noise_w"`      // the stochastic duration predictor's noise
}

// Config is a voice's .onnx.json.
type Config struct {
	Audio struct {
		SampleRate int    `json:"sample_rate"`
		Quality    string `json:"quality"`
	} `json:"audio"`
	Espeak struct {
		Voice string `json:"voice"`
	} `json:"espeak"`
	Inference    Inference          `json:"inference"`
	PhonemeType  string             `json:"phoneme_type"`
	PhonemeIDMap map[string][]int64 `json:"phoneme_id_map"`
	NumSymbols   int                `json:"num_symbols"`
	NumSpeakers  int                `json:"num_speakers"`
	SpeakerIDMap map[string]int     `json:"speaker_id_map"`
	PiperVersion string             `json:"piper_version"`
	HopLength    int                `json:"hop_length"`
}

// ErrConfig is wrapped by LoadConfig's validation errors.
var ErrConfig = errors.New("piper: bad voice config")

// LoadConfig reads and checks a voice config. Only espeak phonemes are
// supported (what every Piper voice for a language espeak-ng knows uses).
func LoadConfig(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("piper: %w", err)
	}
	if fi.Size() > MaxConfigSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, over %d", ErrConfig, path, fi.Size(), MaxConfigSize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("piper: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	if c.HopLength == 0 {
		c.HopLength = 256 // piper-tts's default
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	return &c, nil
}

func (c *Config) validate() error {
	if c.PhonemeType != "" && c.PhonemeType != "espeak" {
		return fmt.Errorf("phoneme_type %q is not supported (only espeak)", c.PhonemeType)
	}
	if c.Espeak.Voice == "" {
		return errors.New("no espeak voice")
	}
	if c.Audio.SampleRate <= 0 || c.Audio.SampleRate > 192000 {
		return fmt.Errorf("sample rate %d", c.Audio.SampleRate)
	}
	if c.NumSymbols <= 0 {
		return fmt.Errorf("num_symbols %d", c.NumSymbols)
	}
	for _, p := range []string{Pad, BOS, EOS} {
		if len(c.PhonemeIDMap[p]) == 0 {
			return fmt.Errorf("phoneme_id_map has no %q", p)
		}
	}
	for p, ids := range c.PhonemeIDMap {
		for _, id := range ids {
			if id < 0 || id >= int64(c.NumSymbols) {
				return fmt.Errorf("phoneme %q has id %d outside [0, %d)", p, id, c.NumSymbols)
			}
		}
	}
	return nil
}
