// Package whisper runs OpenAI's Whisper speech recognition model over the
// engine's op set (package backend), from the CTranslate2 weights
// faster-whisper uses (package ct2): the convolution stem and encoder
// over a 30-second log-mel window, the decoder with its self-attention KV
// cache and the cross-attention keys and values of the encoded window,
// and decoding as faster-whisper does it (the timestamp rules, the seek
// loop over long audio, timestamp tokens to segments, temperature
// fallback). Audio decoding and the log-mel front end are package audio's.
package whisper
