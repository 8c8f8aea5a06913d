package remote

import (
	"context"
	"fmt"

	"fusion/cluster/enginepb"
	"fusion/engine"
)

// DetectSpeech finds speech on the local engine.
func (s *Service) DetectSpeech(ctx context.Context, p *enginepb.VADRequest) (*enginepb.VADReply, error) {
	d, ok := s.cfg.Engine.(engine.SpeechDetector)
	if !ok {
		return nil, statusOf(fmt.Errorf("%w: this node's engine does not detect speech", engine.ErrUnavailable))
	}
	res, err := d.DetectSpeech(ctx, vadRequestFromPB(p))
	if err != nil {
		return nil, statusOf(err)
	}
	out := &enginepb.VADReply{Duration: res.Duration, Segments: make([]*enginepb.VADSegment, len(res.Segments))}
	for i, sg := range res.Segments {
		out.Segments[i] = &enginepb.VADSegment{Start: sg.Start, End: sg.End}
	}
	return out, nil
}

// DetectSpeech finds speech on the peer.
func (c *Client) DetectSpeech(ctx context.Context, req *engine.VADRequest) (*engine.VADResult, error) {
	rep, err := c.pb.DetectSpeech(ctx, vadRequestToPB(req))
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	res := &engine.VADResult{Duration: rep.GetDuration(), Segments: make([]engine.VADSegment, len(rep.GetSegments()))}
	for i, sg := range rep.GetSegments() {
		res.Segments[i] = engine.VADSegment{Start: sg.GetStart(), End: sg.GetEnd()}
	}
	return res, nil
}

var _ engine.SpeechDetector = (*Client)(nil)

func vadRequestToPB(r *engine.VADRequest) *enginepb.VADRequest {
	return &enginepb.VADRequest{Model: r.Model, Audio: r.Audio, MaxBytes: r.MaxBytes, MaxSeconds: r.MaxSeconds,
		Threshold: r.Threshold, NegThreshold: r.NegThreshold, MinSpeechMs: int32(r.MinSpeechMS),
		MinSilenceMs: int32(r.MinSilenceMS), SpeechPadMs: int32(r.SpeechPadMS), MaxSpeechSeconds: r.MaxSpeechSeconds}
}

func vadRequestFromPB(p *enginepb.VADRequest) *engine.VADRequest {
	return &engine.VADRequest{Model: p.GetModel(), Audio: p.GetAudio(), MaxBytes: p.GetMaxBytes(), MaxSeconds: p.GetMaxSeconds(),
		Threshold: p.GetThreshold(), NegThreshold: p.GetNegThreshold(), MinSpeechMS: int(p.GetMinSpeechMs()),
		MinSilenceMS: int(p.GetMinSilenceMs()), SpeechPadMS: int(p.GetSpeechPadMs()), MaxSpeechSeconds: p.GetMaxSpeechSeconds()}
}
