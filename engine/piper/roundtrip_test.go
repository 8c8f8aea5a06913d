package piper

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
	"unicode"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
	"fusion/engine/backend/cpu"
	"fusion/engine/whisper"
)

// twenty are Harvard sentences (lists 1 and 2) for the round trip.
var twenty = []string{
	"The birch canoe slid on the smooth planks.",
	"Glue the sheet to the dark blue background.",
	"It's easy to tell the depth of a well.",
	"These days a chicken leg is a rare dish.",
	"Rice is often served in round bowls.",
	"The juice of lemons makes fine punch.",
	"The box was thrown beside the parked truck.",
	"The hogs were fed chopped corn and garbage.",
	"Four hours of steady work faced us.",
	"A large size in stockings is hard to sell.",
	"The boy was there when the sun rose.",
	"A rod is used to catch pink salmon.",
	"The source of the huge river is the clear spring.",
	"Kick the ball straight and follow through.",
	"Help the woman get back to her feet.",
	"A pot of tea helps to pass the evening.",
	"Smoky fires lack flame and heat.",
	"The soft cushion broke the man's fall.",
	"The salt breeze came across from the sea.",
	"The girl at the booth sold fifty bonds.",
}

// words splits a transcript into lower-case words for the WER.
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' })
}

// editDistance is the word-level Levenshtein distance.
func editDistance(a, b []string) int {
	d := make([]int, len(b)+1)
	for j := range d {
		d[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := d[0]
		d[0] = i
		for j := 1; j <= len(b); j++ {
			cur := d[j]
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			d[j] = min(d[j]+1, d[j-1]+1, prev+c)
			prev = cur
		}
	}
	return d[len(b)]
}

// Packing of the round trip's speech into Whisper windows.
const (
	roundTripGap    = 0.5  // seconds of silence between two sentences
	roundTripWindow = 28.0 // most seconds of speech in one transcription
)

// TestRoundTripWER speaks 20 sentences with the voice (noise scales 0,
// Debian's espeak-ng data) and transcribes them with our Whisper tiny.en:
// the word error rate over all of them must be at most 10%. Whisper pads
// every input to a 30-second window, so transcribing the sentences one by
// one ran the encoder 20 times on mostly silence: the sentences are
// packed instead, whole and in order with half a second of silence
// between them, into as few transcriptions of at most 28 s as they fit
// (two for these 43.7 s), each transcript scored against its sentences.
// It reports the synthesis real-time factor too. It takes minutes under
// -race, so it runs only with FUSION_TTS_ROUNDTRIP=1, which `make test`
// sets in a later step without -race (measured 2026-12-03: see DESIGN.md).
func TestRoundTripWER(t *testing.T) {
	if os.Getenv("FUSION_TTS_ROUNDTRIP") != "1" {
		t.Skip("set FUSION_TTS_ROUNDTRIP=1 to run the 20-sentence round trip (make test does, without -race)")
	}
	v, _ := loadJoe(t)
	ctx := context.Background()
	wm, err := whisper.Load(ctx, audiotest.WhisperTinyEn(t), cpu.New(cpu.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer wm.Close()
	start := time.Now()
	var audioSec, synthSec float64
	speech := make([][]float32, len(twenty)) // 16 kHz mono
	for i, text := range twenty {
		var x []float32
		t0 := time.Now()
		err := v.Speak(ctx, Espeak{}, text, Scales{Length: 1}, nil, func(s Sentence) error { x = append(x, s.Samples...); return nil })
		if err != nil {
			t.Fatal(err)
		}
		synthSec += time.Since(t0).Seconds()
		audioSec += float64(len(x)) / float64(v.Config.Audio.SampleRate)
		if speech[i], err = audio.Mono16k(ctx, audio.Signal{Rate: v.Config.Audio.SampleRate, Channels: 1, Samples: x}); err != nil {
			t.Fatal(err)
		}
	}
	errs, total, windows := 0, 0, 0
	transcribeSec := 0.0
	for first := 0; first < len(twenty); {
		// Whole sentences while they fit; a sentence alone always goes.
		last, samples := first+1, len(speech[first])
		gap := int(roundTripGap * 16000)
		for last < len(twenty) && float64(samples+gap+len(speech[last]))/16000 <= roundTripWindow {
			samples += gap + len(speech[last])
			last++
		}
		var x []float32
		for i := first; i < last; i++ {
			if i > first {
				x = append(x, make([]float32, gap)...)
			}
			x = append(x, speech[i]...)
		}
		t0 := time.Now()
		res, err := wm.Transcribe(ctx, x, whisper.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		transcribeSec += time.Since(t0).Seconds()
		want := strings.Join(twenty[first:last], " ")
		e := editDistance(words(want), words(res.Text))
		errs += e
		total += len(words(want))
		windows++
		t.Logf("sentences %d-%d (%.1f s): %q (%d errors)", first+1, last, float64(len(x))/16000, res.Text, e)
		first = last
	}
	wer := float64(errs) / float64(total)
	t.Logf("synthesis: %.1f s of audio in %.1f s, RTF %.2f audio-s/s; transcription: %d windows in %.1f s; WER %d/%d = %.3f; %.1f s in all",
		audioSec, synthSec, audioSec/synthSec, windows, transcribeSec, errs, total, wer, time.Since(start).Seconds())
	if wer > 0.10 {
		t.Errorf("WER %.3f over 10%%", wer)
	}
}
