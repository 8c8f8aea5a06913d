package runner

import (
	"context"
	"slices"
	"strings"

	"fusion/engine"
	"fusion/engine/piper"
)

// speechSeed seeds the voices' noise: a request's speech depends only on
// its text, voice and speed.
const speechSeed = 0

// voiceNames lists a voice model's voices: its speakers, or the one
// engine.DefaultVoice.
func voiceNames(v *piper.Voice) []string {
	if len(v.Config.SpeakerIDMap) == 0 {
		return []string{engine.DefaultVoice}
	}
	names := make([]string, 0, len(v.Config.SpeakerIDMap))
	for n := range v.Config.SpeakerIDMap {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Speak synthesizes the request's text on a voice model of the pool
// (loading it, evicting others, as Generate does), handing each
// sentence's 16-bit PCM to req.OnAudio as it is made. One synthesis runs
// at a time per voice.
func (r *Runner) Speak(ctx context.Context, req *engine.SpeechRequest) (*engine.SpeechResult, error) {
	if strings.TrimSpace(req.Input) == "" {
		return nil, invalid("input must not be empty")
	}
	if len(req.Input) > piper.MaxTextBytes {
		return nil, invalid("input of %d bytes is over this engine's limit of %d", len(req.Input), piper.MaxTextBytes)
	}
	speed := req.Speed
	if speed == 0 {
		speed = 1
	}
	if !(speed >= engine.MinSpeechSpeed && speed <= engine.MaxSpeechSpeed) {
		return nil, invalid("speed must be between %v and %v, got %v", engine.MinSpeechSpeed, engine.MaxSpeechSpeed, req.Speed)
	}
	em, done, err := r.enterEncoder(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	if em == nil || em.tts == nil {
		return nil, invalid("model %q is a%s %s model; it does not speak", req.Model, article(kindOf(em)), kindOf(em))
	}
	v := em.tts
	names := voiceNames(v)
	if req.Voice != "" && !slices.Contains(names, req.Voice) {
		return nil, invalid("voice %q is not one of model %q's voices: %s", req.Voice, req.Model, strings.Join(names, ", "))
	}
	if len(v.Config.SpeakerIDMap) > 0 {
		// The voice graph here is the single-speaker one (no speaker embedding).
		return nil, invalid("model %q has %d speakers; multi-speaker voices are not supported yet", req.Model, len(v.Config.SpeakerIDMap))
	}
	inf := v.Config.Inference
	sc := piper.Scales{Noise: inf.NoiseScale, Length: inf.LengthScale / float32(speed), NoiseW: inf.NoiseW}
	res := &engine.SpeechResult{SampleRate: v.Config.Audio.SampleRate}
	em.ttsMu.Lock()
	defer em.ttsMu.Unlock()
	err = v.Speak(ctx, r.cfg.Espeak, req.Input, sc, piper.Normal(speechSeed), func(s piper.Sentence) error {
		pcm := piper.PCM16(s.Samples)
		res.Samples += len(pcm)
		if req.OnAudio == nil {
			return nil
		}
		return req.OnAudio(engine.SpeechAudio{SampleRate: res.SampleRate, PCM: pcm})
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
