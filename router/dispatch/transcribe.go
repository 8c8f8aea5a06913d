package dispatch

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"fusion/engine"
)

// splitTranscription runs a batched transcription's pieces (see
// engine.TranscribeRequest.Batched) on several nodes at once: each node
// gets the file, the speech ranges and a contiguous run of the pieces
// (engine.SharePieces: runs of similar speech length), and the segments
// are joined in piece order and numbered again from 1. The pieces are
// independent, so the join is what one node would answer. Segments reach
// req.OnSegment in order, each share's once the shares before it are
// done. A share its node refuses (overloaded, gone) runs where a whole
// request would; any other failure cancels the other shares and is the
// request's.
func (d *Dispatcher) splitTranscription(ctx context.Context, req *engine.TranscribeRequest, pieces []engine.SpeechPiece, nodes []Peer) (*engine.TranscribeResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shares := engine.SharePieces(pieces, len(nodes))
	outs := make([]*engine.TranscribeResult, len(shares))
	var (
		mu      sync.Mutex // guards outs, first, emitted; serializes req.OnSegment
		first   error
		emitted int // shares handed to req.OnSegment
		id      int // segments numbered so far
		wg      sync.WaitGroup
	)
	// emit numbers and hands on the segments of the done shares that
	// follow the ones already handed on (with mu held).
	emit := func() {
		for emitted < len(outs) && outs[emitted] != nil {
			for i := range outs[emitted].Segments {
				id++
				s := &outs[emitted].Segments[i]
				s.ID = id
				if req.OnSegment != nil {
					req.OnSegment(*s)
				}
			}
			emitted++
		}
	}
	for j, sh := range shares {
		node := nodes[j]
		r := *req
		r.Pieces = sh
		r.OnSegment = nil
		wg.Go(func() {
			out, err := d.transcribeOn(ctx, node, &r)
			if err != nil && retryable(err) && ctx.Err() == nil {
				d.cfg.Logger.Warn("dispatch: transcription share refused, running it elsewhere", "node", node.ID, "err", err)
				out, err = d.transcribe(ctx, &r)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("transcription pieces %d to %d of %d on node %s: %w", sh[0]+1, sh[1], len(pieces), node.ID, err)
				}
				cancel()
				return
			}
			if first == nil {
				outs[j] = out
				emit()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	res := *outs[0]
	res.Segments = nil
	var b strings.Builder
	for _, o := range outs {
		res.Segments = append(res.Segments, o.Segments...)
		for _, s := range o.Segments {
			b.WriteString(s.Text)
		}
	}
	res.Text = strings.TrimSpace(b.String())
	return &res, nil
}

// transcribeOn runs req on node: the local engine for this node, else
// the peer's Engine service.
func (d *Dispatcher) transcribeOn(ctx context.Context, node Peer, req *engine.TranscribeRequest) (*engine.TranscribeResult, error) {
	g, err := d.engineOn(node)
	if err != nil {
		return nil, err
	}
	t, ok := g.(engine.Transcriber)
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	return t.Transcribe(ctx, req)
}

// engineOn is node's engine: the local one for this node, else the
// peer's Engine service (ErrUnavailable when it cannot be reached).
func (d *Dispatcher) engineOn(node Peer) (any, error) {
	if node.ID == d.cfg.Table.Self() {
		return d.cfg.Local, nil
	}
	gen, err := d.cfg.Connect.Engine(node.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", engine.ErrUnavailable, err)
	}
	return gen, nil
}
