// Package silero runs Silero VAD (v5/v6 16 kHz graphs, as faster-whisper
// ships silero_vad_v6.onnx) on the engine's op set, and turns its speech
// probabilities into speech segments with faster-whisper's
// get_speech_timestamps rules.
//
// The network, per 512-sample chunk of 16 kHz audio with the previous
// chunk's last 64 samples before it: an STFT as a strided convolution
// (256-sample frames, hop 128, reflect padding on the right) and its
// magnitude, four 1-D convolutions with ReLU, then an LSTM whose state
// runs from chunk to chunk, ReLU, a 1×1 convolution and a sigmoid: one
// speech probability per chunk. Weights are read from the ONNX file with
// package onnx; the graph is not interpreted, only checked to be the one
// this code computes.
package silero
