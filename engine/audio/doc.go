// Package audio turns uploaded audio bytes into samples: Decode sniffs the
// real container and codec from the bytes (never from a file name) and
// returns a Signal of interleaved float32 samples in [-1, 1] at the file's
// own rate and channel count; Mono16k downmixes and resamples it to what
// speech models take (16 kHz mono, band-limited by package resample).
//
// WAV (PCM 8/16/24/32-bit, IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE) is
// parsed here; FLAC, MP3 and Ogg Vorbis go through pure-Go decoders; Ogg
// Opus, MP4/M4A (AAC, ALAC), ADTS AAC, Matroska/WebM, AIFF and MPEG layer
// I/II go through ffmpeg when it is installed. Every limit (bytes, duration,
// channels, rate) is an Options field, checked from the header before the
// whole stream is decoded where the format states its length. A bad upload
// is an *Error wrapping one sentinel (ErrNotAudio, ErrTruncated,
// ErrMalformed, ErrUnsupported, ErrTooLarge, ErrTooLong, ErrNoFFmpeg) that
// an endpoint maps to a 4xx naming the problem.
package audio
