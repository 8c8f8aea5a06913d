package pipeline

import (
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fusion/engine/model"
	"fusion/engine/runner"
)

// countingConn counts the bytes written to a connection.
type countingConn struct {
	net.Conn
	written *int64 // atomic
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	atomic.AddInt64(c.written, int64(n))
	return n, err
}

// spin stands for a compute kernel: it loops up to n times, until *p is
// not before, with no point at which Go may preempt it (nosplit: no
// stack check; norace: no race-detector calls, which would be such
// points; the plain read of an aligned int64 is atomic on the machines
// this runs on).
//
//go:nosplit
//go:norace
func spin(p *int64, before int64, n int) bool {
	for range n {
		if *p != before {
			return true
		}
	}
	return false
}

// TestSendReachesTheSocket: a step handed to the link is on the socket
// when Start returns, even though the sender then computes without a
// point at which Go could preempt it (a compute kernel) and has the only
// processor: Start yields to gRPC's writer. Without the yield, the next
// stage would get the step only after the sender's next forward pass,
// and micro-batches would run in lock-step (the 2-stage bench gained
// nothing over one stage). It runs in a child process with one processor
// and asynchronous preemption off, which the spin below stands for.
func TestSendReachesTheSocket(t *testing.T) {
	if os.Getenv("FUSION_PIPELINE_YIELD_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSendReachesTheSocket$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FUSION_PIPELINE_YIELD_CHILD=1", "GODEBUG=asyncpreemptoff=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	dir := demoModel(t, 5)
	first := load(t, dir, model.Range{Start: 0, End: 1})
	rest := load(t, dir, model.Range{Start: 1, End: 4})
	_, addr, _ := serve(t, func(string) (Stage, bool) { return Stage{Generation: 1, Model: rest}, true })
	var written int64
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return countingConn{Conn: c, written: &written}, nil
			}))
	}
	c := NewClient("m", 1, addr, dial)
	defer c.Close()
	ctx := context.Background()
	q, err := first.NewSequence(16)
	if err != nil {
		t.Fatal(err)
	}
	// The prompt opens the stream; then decode steps. The race detector
	// shuffles the scheduler's queues, so the writer may rarely need more
	// than the yields it gets: one miss is allowed. Without the yield no
	// step reaches the socket while the spin runs (nothing else can run).
	steps := [][]int{{1, 2, 3}, {4}, {5}, {6}, {7}, {8}, {9}}
	missed := 0
	for step, toks := range steps {
		h, err := first.Forward(ctx, []model.Input{{Seq: q, Tokens: toks}}, model.Range{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := runner.StageSeq{ID: 1, Len: len(toks)}
		if step == 0 {
			s.MaxLen = 16
		}
		before := atomic.LoadInt64(&written)
		wait, err := c.Start(ctx, []runner.StageSeq{s}, h.Hidden)
		if err != nil {
			t.Fatal(err)
		}
		// The next forward pass (the bound is a second or so of spinning).
		if !spin(&written, before, 1_000_000_000) {
			t.Logf("step %d: nothing written to the socket while the sender computed", step)
			missed++
		}
		if _, err := wait(); err != nil {
			t.Fatal(err)
		}
	}
	if missed > 1 {
		t.Fatalf("%d of %d steps were not on the socket while the sender computed", missed, len(steps))
	}
}
