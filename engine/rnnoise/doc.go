// Package rnnoise runs RNNoise 0.2 (Jean-Marc Valin's speech denoiser, the
// model pyrnnoise ships compiled into its library) on the engine's op set.
//
// The model works on 48 kHz audio in 10 ms frames (480 samples): per
// frame, 65 features (32 Bark-like band log energies through a DCT, 32
// pitch correlations through a DCT, the pitch period) go through two
// causal convolutions over 3 frames (tanh), three GRUs of 384 units whose
// state runs from frame to frame, and two dense layers (sigmoid): 32 band
// gains and a voice probability.
//
// The signal processing around the network runs on the host, after
// RNNoise's C code: the input's high-pass filter, the 20 ms analysis
// window and FFT, band energies, the pitch search and pitch-delayed
// spectrum, and after the network the pitch filter, the band gains spread
// over the bins of the previous frame, the inverse FFT and overlap-add.
// ReadBlob reads the weights as RNNoise's own weight blob ("DNNw" records,
// what rnnoise_model_from_file reads); Model.Denoise runs a clip,
// Denoiser.Process a stream. See DESIGN.md.
package rnnoise
