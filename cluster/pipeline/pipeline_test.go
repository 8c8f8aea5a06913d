package pipeline

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/backend/mlx"
	"fusion/engine/demo"
	"fusion/engine/model"
	"fusion/engine/runner"
)

// demoModel creates a four-layer demo model of seed and returns its
// directory.
func demoModel(t *testing.T, seed uint64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	o := demo.DefaultOptions()
	o.Layers, o.Seed = 4, seed
	if _, err := demo.Create(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// load loads layers of the demo model at dir on a CPU backend.
func load(t *testing.T, dir string, layers model.Range) *model.Model {
	t.Helper()
	return loadOn(t, dir, layers, nil)
}

// loadOn loads layers of the demo model at dir on be, or on a CPU backend
// of its own when be is nil.
func loadOn(t *testing.T, dir string, layers model.Range, be backend.Backend) *model.Model {
	t.Helper()
	if be == nil {
		cb := cpu.New(cpu.Options{Threads: 1})
		t.Cleanup(func() { cb.Close() })
		be = cb
	}
	m, err := model.Load(context.Background(), dir, be, model.Options{Layers: layers, Mmap: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// nativeMLX is MLX computing in the model's dtype (bf16 for the demo
// models), or nil (a skip line) when libmlxc does not load;
// FUSION_REQUIRE_MLX=1 makes that a failure.
func nativeMLX(t *testing.T) backend.Backend {
	t.Helper()
	if err := mlx.Available(); err != nil {
		if os.Getenv("FUSION_REQUIRE_MLX") == "1" {
			t.Fatalf("FUSION_REQUIRE_MLX=1 and MLX is unavailable: %v", err)
		}
		t.Skipf("MLX unavailable: %v", err)
	}
	be, err := mlx.New(mlx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

// serve starts a Pipeline server over lookup on loopback and returns a
// dial function to it.
func serve(t *testing.T, lookup Lookup) (*Server, string, Dial) {
	t.Helper()
	return serveTraced(t, lookup, nil)
}

// serveTraced is serve with the server recording spans through start
// (nil: none).
func serveTraced(t *testing.T, lookup Lookup, start StartSpan) (*Server, string, Dial) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	gs := grpc.NewServer()
	srv := Register(gs, lookup, dial, nil)
	if start != nil {
		srv.TraceWith(start)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return srv, lis.Addr().String(), dial
}

// stages3 is a demo model in three stages: the whole model and the first
// stage's layers here, the middle and last stages served on loopback,
// and a client to the middle one.
type stages3 struct {
	whole, first *model.Model
	c            *Client
	mid, last    *Server
	lastAddr     string // the last stage's address
	dial         Dial
}

func threeStages(t *testing.T, seed, generation uint64) stages3 {
	t.Helper()
	return threeStagesOn(t, seed, generation, nil)
}

// threeStagesOn is threeStages with every stage on be (nil: CPU).
func threeStagesOn(t *testing.T, seed, generation uint64, be backend.Backend) stages3 {
	t.Helper()
	dir := demoModel(t, seed)
	p := stages3{whole: loadOn(t, dir, model.Range{}, be), first: loadOn(t, dir, model.Range{Start: 0, End: 1}, be)}
	middle := loadOn(t, dir, model.Range{Start: 1, End: 2}, be)
	last := loadOn(t, dir, model.Range{Start: 2, End: 4}, be)
	var midAddr string
	p.last, p.lastAddr, _ = serve(t, func(string) (Stage, bool) { return Stage{Generation: generation, Model: last}, true })
	p.mid, midAddr, p.dial = serve(t, func(string) (Stage, bool) {
		return Stage{Generation: generation, Model: middle, Next: p.lastAddr}, true
	})
	p.c = NewClient("m", generation, midAddr, p.dial)
	t.Cleanup(func() { p.c.Close() })
	return p
}

// sequencePairs makes n sequences of maxLen positions on whole and on
// first each.
func sequencePairs(t *testing.T, whole, first *model.Model, n, maxLen int) (ws, fs []*model.Sequence) {
	t.Helper()
	ws, fs = make([]*model.Sequence, n), make([]*model.Sequence, n)
	for i := range n {
		var err error
		if ws[i], err = whole.NewSequence(maxLen); err != nil {
			t.Fatal(err)
		}
		if fs[i], err = first.NewSequence(maxLen); err != nil {
			t.Fatal(err)
		}
	}
	return ws, fs
}

// stepBoth runs a step on the whole model (win) and through the pipeline
// (fin on first, then c): the whole model's output and the pipeline's
// answers.
func stepBoth(t *testing.T, whole, first *model.Model, c *Client, win, fin []model.Input, seqs []runner.StageSeq) (*model.Output, []runner.StageResult) {
	t.Helper()
	ctx := context.Background()
	want, err := whole.Forward(ctx, win, model.Range{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := first.Forward(ctx, fin, model.Range{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Step(ctx, seqs, h.Hidden)
	if err != nil {
		t.Fatal(err)
	}
	return want, got
}

// TestClientServer: two sequences prefilled and decoded through a first
// stage here and the rest over a Pipeline stream (hidden states and
// logits split over several messages) give the whole model's logits bit
// for bit, on the CPU backend (float32 activations: f32 on the wire,
// hidden × 4 bytes a token) and on MLX in the bf16 model's own type (bf16
// on the wire, hidden × 2); freeing them drops their KV on the far stage;
// a client of another generation, or for a model the server has no stage
// of, is refused with ErrPipelineStage.
func TestClientServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		be    func(*testing.T) backend.Backend
		bytes int // wire bytes per value
	}{
		{"cpu f32", func(*testing.T) backend.Backend { return nil }, 4},
		{"mlx bf16", nativeMLX, 2},
	} {
		t.Run(tc.name, func(t *testing.T) { clientServer(t, tc.be(t), tc.bytes) })
	}
}

func clientServer(t *testing.T, be backend.Backend, wireBytes int) {
	dir := demoModel(t, 3)
	whole := loadOn(t, dir, model.Range{}, be)
	first := loadOn(t, dir, model.Range{Start: 0, End: 1}, be)
	rest := loadOn(t, dir, model.Range{Start: 1, End: 4}, be)
	srv, addr, dial := serve(t, func(name string) (Stage, bool) {
		if name != "m" {
			return Stage{}, false
		}
		return Stage{Generation: 7, Model: rest}, true
	})
	c := NewClient("m", 7, addr, dial)
	defer c.Close()
	// Small chunks: every step's hidden state and logits go in parts.
	c.chunk, srv.chunk = 100, 300
	ctx := context.Background()

	prompts := [][]int{{1, 2, 3, 4, 5}, {9, 8, 7}}
	ws, fs := sequencePairs(t, whole, first, 2, 64)
	step := func(tokens [][]int, firstStep bool) {
		t.Helper()
		var win, fin []model.Input
		var seqs []runner.StageSeq
		for i, toks := range tokens {
			win = append(win, model.Input{Seq: ws[i], Tokens: toks})
			fin = append(fin, model.Input{Seq: fs[i], Tokens: toks})
			s := runner.StageSeq{ID: uint64(i + 1), Len: len(toks)}
			if firstStep {
				s.MaxLen = 64
			}
			seqs = append(seqs, s)
		}
		want, got := stepBoth(t, whole, first, c, win, fin, seqs)
		for i := range want.Logits {
			for j := range want.Logits[i] {
				if math.Float32bits(got[i].Logits[j]) != math.Float32bits(want.Logits[i][j]) {
					t.Fatalf("sequence %d logit %d: %v over the pipeline, %v whole", i, j, got[i].Logits[j], want.Logits[i][j])
				}
			}
		}
	}
	step(prompts, true)
	for k := range 4 {
		step([][]int{{10 + k}, {20 + k}}, false)
	}
	if n := srv.Sequences(); n != 2 {
		t.Fatalf("the far stage holds %d sequences, want 2", n)
	}
	// 5 steps of 8, then 4 × 2 rows; the loop's times are counted.
	if c := srv.Counts(); c.Steps != 5 || c.Rows != 16 || c.Forward <= 0 || c.Sample <= 0 || c.Send <= 0 || c.Idle <= 0 {
		t.Fatalf("the far stage counted %+v, want 5 steps of 16 rows and every time", c)
	}
	// 8 prompt positions and 4 × 2 decoded ones went down.
	if w := c.Wire(); w.Rows != 16 || w.Bytes != w.Rows*int64(whole.Config.HiddenSize*wireBytes) || w.DType != wireDType(wireBytes) {
		t.Fatalf("%d rows in %d bytes of %s down, want 16 of %d × %d bytes, %s", w.Rows, w.Bytes, w.DType, whole.Config.HiddenSize, wireBytes, wireDType(wireBytes))
	}
	c.Free([]uint64{1, 2})
	deadline := time.Now().Add(5 * time.Second)
	for srv.Sequences() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the far stage still holds %d sequences after the free", srv.Sequences())
		}
		time.Sleep(5 * time.Millisecond)
	}

	h := &model.Hidden{Rows: 1, Cols: whole.Config.HiddenSize, Data: make([]float32, whole.Config.HiddenSize)}
	for _, tc := range []struct {
		name, model string
		gen         uint64
		want        string
	}{
		{"older generation", "m", 6, "stale generation"},
		{"no stage here", "other", 7, "no stage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := NewClient(tc.model, tc.gen, addr, dial)
			defer bad.Close()
			_, err := bad.Step(ctx, []runner.StageSeq{{ID: 1, Len: 1, MaxLen: 8}}, h)
			if !errors.Is(err, runner.ErrPipelineStage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrPipelineStage naming %q", err, tc.want)
			}
		})
	}
	// A sequence the broken stream had seen cannot continue on a new one.
	bad := NewClient("m", 6, addr, dial)
	defer bad.Close()
	_, _ = bad.Step(ctx, []runner.StageSeq{{ID: 1, Len: 1, MaxLen: 8}}, h)
	if _, err := bad.Step(ctx, []runner.StageSeq{{ID: 1, Len: 1}}, h); !errors.Is(err, runner.ErrPipelineStage) {
		t.Fatalf("a sequence of a broken stream stepped again: %v", err)
	}
}

// TestThreeStagesInFlight: micro-batches started one after the other
// without waiting (as the first stage's scheduler does) go through a
// middle stage that forwards each before the previous is answered, and
// come back with the whole model's logits bit for bit (CPU, f32 on the
// wire; MLX in bf16, bf16 on the wire); freeing the sequences drops their KV on both later stages.
func TestThreeStagesInFlight(t *testing.T) {
	t.Run("cpu f32", func(t *testing.T) { threeStagesInFlight(t, nil, DTypeF32) })
	t.Run("mlx bf16", func(t *testing.T) { threeStagesInFlight(t, nativeMLX(t), DTypeBF16) })
}

// wireDType is the dtype of a wire's bytes per value.
func wireDType(bytes int) string {
	return map[int]string{2: DTypeBF16, 4: DTypeF32}[bytes]
}

func threeStagesInFlight(t *testing.T, be backend.Backend, dtype string) {
	p := threeStagesOn(t, 5, 3, be)
	whole, first, c, midSrv, lastSrv := p.whole, p.first, p.c, p.mid, p.last
	ctx := context.Background()
	const n = 4 // micro-batches of one sequence each
	ws, fs := sequencePairs(t, whole, first, n, 32)
	for step := range 5 {
		waits := make([]func() ([]runner.StageResult, error), n)
		wants := make([][]float32, n)
		for i := range n {
			toks := []int{1 + i + step, 2 + step}
			if step > 0 {
				toks = toks[:1]
			}
			w, err := whole.Forward(ctx, []model.Input{{Seq: ws[i], Tokens: toks}}, model.Range{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			wants[i] = w.Logits[0]
			h, err := first.Forward(ctx, []model.Input{{Seq: fs[i], Tokens: toks}}, model.Range{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := runner.StageSeq{ID: uint64(i + 1), Len: len(toks)}
			if step == 0 {
				s.MaxLen = 32
			}
			if waits[i], err = c.Start(ctx, []runner.StageSeq{s}, h.Hidden); err != nil {
				t.Fatal(err)
			}
		}
		for i, wait := range waits {
			got, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			for j, v := range wants[i] {
				if math.Float32bits(got[0].Logits[j]) != math.Float32bits(v) {
					t.Fatalf("step %d sequence %d logit %d: %v over 3 stages, %v whole", step, i, j, got[0].Logits[j], v)
				}
			}
		}
	}
	if a, b := midSrv.Sequences(), lastSrv.Sequences(); a != n || b != n {
		t.Fatalf("the later stages hold %d and %d sequences, want %d", a, b, n)
	}
	// n prompts of 2 positions, then 4 decode steps of n one-position rows.
	if w, rows := c.Wire(), int64(2*n+4*n); w.DType != dtype || w.Rows != rows || w.Bytes != rows*int64(whole.Config.HiddenSize)*int64(dtypeBytes(dtype)) {
		t.Fatalf("%d rows in %d bytes of %s down, want %d rows of %d values in %s", w.Rows, w.Bytes, w.DType, rows, whole.Config.HiddenSize, dtype)
	}
	c.Free([]uint64{1, 2, 3, 4})
	deadline := time.Now().Add(10 * time.Second)
	for midSrv.Sequences()+lastSrv.Sequences() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still held after the free: %d and %d", midSrv.Sequences(), lastSrv.Sequences())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHiddenWire: a hidden state goes as bf16 exactly when every value is
// a bfloat16 value, and decodes to the same bits either way; a dtype or
// size that does not match the shape is refused.
func TestHiddenWire(t *testing.T) {
	bf := []float32{1, -2.5, 0, float32(math.Inf(1)), math.Float32frombits(0x3f81_0000)}
	f32 := append(slices.Clone(bf), math.Float32frombits(0x3f81_0001))
	for _, tc := range []struct {
		name  string
		v     []float32
		dtype string
	}{
		{"bf16 values", bf, DTypeBF16},
		{"one float32 value", f32, DTypeF32},
		{"empty", nil, DTypeBF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dtype, b := encodeHidden(tc.v)
			if dtype != tc.dtype || len(b) != len(tc.v)*int(dtypeBytes(dtype)) {
				t.Fatalf("encoded as %s in %d bytes, want %s", dtype, len(b), tc.dtype)
			}
			h, err := hidden(1, uint32(len(tc.v)), dtype, b)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.v {
				if math.Float32bits(h.Data[i]) != math.Float32bits(tc.v[i]) {
					t.Fatalf("value %d: %x, want %x", i, math.Float32bits(h.Data[i]), math.Float32bits(tc.v[i]))
				}
			}
		})
	}
	for _, tc := range []struct {
		dtype string
		n     int
	}{{"f16", 4}, {DTypeBF16, 6}, {DTypeF32, 4}} {
		if _, err := hidden(1, 2, tc.dtype, make([]byte, tc.n)); err == nil {
			t.Errorf("[1, 2] %s in %d bytes accepted", tc.dtype, tc.n)
		}
	}
}
