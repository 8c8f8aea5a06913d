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
// This package holds the weight blob reader (ReadBlob: the "DNNw" records
// of RNNoise's write_weights, the blob rnnoise_model_from_file reads) and
// the network (Model, State, Model.Run). The signal processing around it
// (analysis window, FFT, band energies, pitch search and filter, gains
// applied per bin, overlap-add synthesis) is not built yet: see DESIGN.md.
package rnnoise
