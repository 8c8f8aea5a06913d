// Package flux2 holds the pieces of FLUX.2 text-to-image generation that
// do not need a compute backend, each equal to what diffusers
// (Flux2KleinPipeline, diffusers 0.42) computes:
//
//   - noise.go: the initial latents of a seed, bit for bit those of
//     torch.Generator("cpu").manual_seed(seed) and torch.randn on the CPU
//     (mt19937 and torch's Box–Muller for float32);
//   - latents.go: the 2×2 patchify/unpatchify of the VAE latents, the
//     packing of [C, H, W] latents into [H·W, C] tokens and back, and the
//     4-axis (t, h, w, l) position ids of image and text tokens;
//   - schedule.go: the flow-matching Euler scheduler with FLUX.2's
//     empirical, resolution- and step-dependent shift (sigmas, timesteps,
//     one Euler step);
//   - config.go and demo.go: the diffusers folder layout (model_index.json
//     and one folder per component) and `create-demo --arch flux2`, a tiny
//     random-weight checkpoint diffusers loads.
//
// On engine/backend ops:
//
//   - transformer.go: Flux2Transformer2DModel and the distilled
//     denoising loop;
//   - textencoder.go: the Qwen3 prompt encoder, reusing engine/model;
//   - pipeline.go: a checkpoint from a prompt to the denoised latents;
//   - vae.go: AutoencoderKLFlux2's decoder, the latent batch norm the
//     pipeline undoes before it, and the quantization of the decoded
//     pixels to an image (VAE.DecodeImage: final latents → *image.NRGBA).
package flux2
