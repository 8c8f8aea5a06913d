package flux2

import "testing"

// TestFLOPs: the counts equal what torch's FlopCounterMode counted over
// one Flux2Transformer2DModel forward and one AutoencoderKLFlux2 decode
// of the same configurations at 256² with 512 text tokens (`fusion bench
// image`, diffusers 0.42.1, torch 2.15), and the real [klein] 4B's
// transformer at 1024² is the ~35 TFLOP a step the design notes use
// (5 + 20 blocks of width 3072 = 24 heads of 128, joint_attention_dim
// 7680, in_channels 128).
func TestFLOPs(t *testing.T) {
	medium := TinyDemo()
	tc := &medium.Transformer
	tc.InChannels, tc.NumLayers, tc.NumSingleLayers = 64, 2, 4
	tc.AttentionHeadDim, tc.NumAttentionHeads, tc.JointAttentionDim, tc.TimestepGuidanceChannels = 64, 8, 192, 256
	vc := &medium.VAE
	vc.BlockOutChannels, vc.LatentChannels, vc.LayersPerBlock = []int{32, 64, 128, 128}, 16, 2
	klein := TransformerConfig{InChannels: 128, NumLayers: 5, NumSingleLayers: 20, AttentionHeadDim: 128, NumAttentionHeads: 24,
		JointAttentionDim: 7680, TimestepGuidanceChannels: 256, MLPRatio: 3}
	for _, tc := range []struct {
		name         string
		t            TransformerConfig
		v            VAEConfig
		size         int
		step, decode int64
	}{
		{"tiny", TinyDemo().Transformer, TinyDemo().VAE, 256, 194025472, 782401536},
		{"medium", medium.Transformer, medium.VAE, 256, 38798622720, 39410204672},
	} {
		h, w := LatentGrid(tc.size, tc.size, tc.v.ScaleFactor())
		if got := tc.t.StepFLOPs(h*w, 512); got != tc.step {
			t.Errorf("%s: step %d FLOPs, torch counted %d", tc.name, got, tc.step)
		}
		if got := tc.v.DecodeFLOPs(tc.size, tc.size); got != tc.decode {
			t.Errorf("%s: decode %d FLOPs, torch counted %d", tc.name, got, tc.decode)
		}
	}
	if got := klein.StepFLOPs(64*64, 512); got < 34e12 || got > 36e12 {
		t.Errorf("[klein] 4B at 1024²: %d FLOPs a step", got)
	}
	if (VAEConfig{}).DecodeFLOPs(64, 64) != 0 || TinyDemo().VAE.DecodeFLOPs(0, 64) != 0 {
		t.Error("an empty config or size counts FLOPs")
	}
}
