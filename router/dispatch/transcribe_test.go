package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/router/dispatch"
)

// pieceEngine transcribes a batched request's pieces as segments "id:p"
// (p the piece, numbered from 1 within its answer as a node does); it
// records the pieces asked and, when fail is set, refuses.
type pieceEngine struct {
	engine.Generator // nil: only Transcribe is called
	id               string
	fail             error
	mu               sync.Mutex
	got              [][2]int
}

func (e *pieceEngine) Transcribe(ctx context.Context, req *engine.TranscribeRequest) (*engine.TranscribeResult, error) {
	e.mu.Lock()
	e.got = append(e.got, req.Pieces)
	e.mu.Unlock()
	if e.fail != nil {
		return nil, e.fail
	}
	from, to := req.Pieces[0], req.Pieces[1]
	if req.Pieces == [2]int{} {
		from, to = 0, len(engine.TranscribePieces(req.Speech))
	}
	res := &engine.TranscribeResult{Language: "en", Duration: 99}
	for p := from; p < to; p++ {
		s := engine.TranscribeSegment{ID: len(res.Segments) + 1, Text: fmt.Sprintf(" %s:%d", e.id, p), Start: float64(p)}
		res.Segments = append(res.Segments, s)
		if req.OnSegment != nil {
			req.OnSegment(s)
		}
	}
	return res, nil
}

func (e *pieceEngine) pieces() [][2]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// transcribeCluster is node a (local engine) with peers b and c, all
// three ready with model "asr".
func transcribeCluster(t *testing.T, a, b, c *pieceEngine) *dispatch.Dispatcher {
	peer := func(e *pieceEngine) dispatch.Peer {
		srv := serveEngine(t, remote.ServerConfig{NodeID: e.id, Engine: e, Logger: quiet})
		return dispatch.Peer{ID: e.id, Addr: srv.Addr(), Alive: true}
	}
	pb, pc := peer(b), peer(c)
	self := dispatch.Peer{ID: "a", Addr: "unused", Alive: true}
	tbl := &table{self: "a", ready: map[string][]dispatch.Peer{"asr": {pc, self, pb}}, peers: []dispatch.Peer{pb, pc}}
	pool := remote.NewPool()
	t.Cleanup(func() { pool.Close() })
	return dispatch.New(dispatch.Config{Local: a, Table: tbl, Connect: pool, Logger: quiet})
}

// TestTranscriptionSplitAcrossNodes: a batched transcription of four
// 20-s speech ranges (four pieces) over three nodes runs piece 0 here,
// 1 and 2 on b and 3 on c (engine.SharePieces), joined in piece order and numbered from 1,
// segments reaching OnSegment in that order; a share a node refuses runs
// elsewhere; one piece, or a request not batched, stays on one node.
func TestTranscriptionSplitAcrossNodes(t *testing.T) {
	const sec = 16000
	var speech []engine.SpeechRange
	for i := range 4 {
		speech = append(speech, engine.SpeechRange{Start: i * 25 * sec, End: (i*25 + 20) * sec})
	}
	req := func(on func(engine.TranscribeSegment)) *engine.TranscribeRequest {
		return &engine.TranscribeRequest{Model: "asr", Audio: []byte("RIFF"), VADFilter: true, Batched: true, Speech: speech, OnSegment: on}
	}
	texts := func(segs []engine.TranscribeSegment) []string {
		var out []string
		for _, s := range segs {
			out = append(out, fmt.Sprintf("%d%s", s.ID, s.Text))
		}
		return out
	}

	a, b, c := &pieceEngine{id: "a"}, &pieceEngine{id: "b"}, &pieceEngine{id: "c"}
	d := transcribeCluster(t, a, b, c)
	var mu sync.Mutex
	var streamed []engine.TranscribeSegment
	res, err := d.Transcribe(context.Background(), req(func(s engine.TranscribeSegment) { mu.Lock(); streamed = append(streamed, s); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1 a:0", "2 b:1", "3 b:2", "4 c:3"}
	if got := texts(res.Segments); !slices.Equal(got, want) {
		t.Errorf("segments %q, want %q", got, want)
	}
	if got := texts(streamed); !slices.Equal(got, want) {
		t.Errorf("streamed %q, want %q", got, want)
	}
	if res.Text != "a:0 b:1 b:2 c:3" || res.Language != "en" || res.Duration != 99 {
		t.Errorf("result %q %q %v", res.Text, res.Language, res.Duration)
	}
	for _, c := range []struct {
		e    *pieceEngine
		want [][2]int
	}{{a, [][2]int{{0, 1}}}, {b, [][2]int{{1, 3}}}, {c, [][2]int{{3, 4}}}} {
		if got := c.e.pieces(); !slices.Equal(got, c.want) {
			t.Errorf("node %s got pieces %v, want %v", c.e.id, got, c.want)
		}
	}

	// One piece (all speech within 30 s), or not batched: one node, the
	// whole request.
	a, b, c = &pieceEngine{id: "a"}, &pieceEngine{id: "b"}, &pieceEngine{id: "c"}
	d = transcribeCluster(t, a, b, c)
	one := req(nil)
	one.Speech = speech[:1]
	if res, err := d.Transcribe(context.Background(), one); err != nil || len(res.Segments) != 1 {
		t.Fatalf("one piece: %v %v", res, err)
	}
	notBatched := req(nil)
	notBatched.Batched = false
	if _, err := d.Transcribe(context.Background(), notBatched); err != nil {
		t.Fatal(err)
	}
	if got := a.pieces(); !slices.Equal(got, [][2]int{{}, {}}) || len(b.pieces())+len(c.pieces()) != 0 {
		t.Errorf("pieces asked: a %v, b %v, c %v; want the whole requests on a", got, b.pieces(), c.pieces())
	}

	// b refuses (overloaded): its share runs where a whole request would.
	a, b, c = &pieceEngine{id: "a"}, &pieceEngine{id: "b", fail: &engine.OverloadedError{Reason: "busy", RetryAfter: 1}}, &pieceEngine{id: "c"}
	d = transcribeCluster(t, a, b, c)
	res, err = d.Transcribe(context.Background(), req(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := texts(res.Segments), []string{"1 a:0", "2 a:1", "3 a:2", "4 c:3"}; !slices.Equal(got, want) {
		t.Errorf("with b refusing: %q, want %q", got, want)
	}

	// Any other failure is the request's.
	a, b, c = &pieceEngine{id: "a"}, &pieceEngine{id: "b", fail: errors.New("gpu on fire")}, &pieceEngine{id: "c"}
	d = transcribeCluster(t, a, b, c)
	if _, err := d.Transcribe(context.Background(), req(nil)); err == nil || !strings.Contains(err.Error(), "gpu on fire") {
		t.Fatalf("err %v, want b's failure", err)
	}
}
