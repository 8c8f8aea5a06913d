package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"fusion/cluster/enginepb"
	"fusion/engine"
)

// Denoise removes noise on the local engine.
func (s *Service) Denoise(ctx context.Context, p *enginepb.DenoiseRequest) (*enginepb.DenoiseReply, error) {
	d, ok := s.cfg.Engine.(engine.SpeechDenoiser)
	if !ok {
		return nil, statusOf(fmt.Errorf("%w: this node's engine does not denoise", engine.ErrUnavailable))
	}
	res, err := d.Denoise(ctx, &engine.DenoiseRequest{Model: p.GetModel(), Audio: p.GetAudio(), MaxBytes: p.GetMaxBytes(), MaxSeconds: p.GetMaxSeconds()})
	if err != nil {
		return nil, statusOf(err)
	}
	return &enginepb.DenoiseReply{SampleRate: int32(res.Rate), Pcm16: pcm16(res.Samples)}, nil
}

// Denoise removes noise on the peer.
func (c *Client) Denoise(ctx context.Context, req *engine.DenoiseRequest) (*engine.DenoiseResult, error) {
	rep, err := c.pb.Denoise(ctx, &enginepb.DenoiseRequest{Model: req.Model, Audio: req.Audio, MaxBytes: req.MaxBytes, MaxSeconds: req.MaxSeconds})
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	b := rep.GetPcm16()
	out := &engine.DenoiseResult{Rate: int(rep.GetSampleRate()), Samples: make([]float32, len(b)/2)}
	for i := range out.Samples {
		out.Samples[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32767
	}
	return out, nil
}

var _ engine.SpeechDenoiser = (*Client)(nil)

// pcm16 quantizes samples as the front end's WAV does (round(clamp(x)·
// 32767)), so that the samples a peer sends are written back unchanged.
func pcm16(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(math.Round(math.Max(-1, math.Min(1, float64(v)))*32767))))
	}
	return b
}
