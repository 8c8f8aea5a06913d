package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// Each successful write stores a value never written before, so a value
// identifies a version: a client's CAS "expect the version I read" is, in
// the model, "expect the value I read".
type casInput struct {
	read     bool
	expect   string // the value read with the expected version ("" = absent)
	newValue string
}

type casOutput struct {
	value   string // read result
	ok      bool   // CAS applied
	unknown bool   // CAS outcome unknown (timeout, leader lost)
}

var casModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(string), input.(casInput), output.(casOutput)
		switch {
		case in.read:
			if out.value == s {
				return []any{s}
			}
			return nil
		case out.unknown:
			if s == in.expect {
				return []any{s, in.newValue}
			}
			return []any{s}
		case out.ok:
			if s == in.expect {
				return []any{in.newValue}
			}
			return nil
		default: // conflict
			if s != in.expect {
				return []any{s}
			}
			return nil
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(casInput), output.(casOutput)
		if in.read {
			return fmt.Sprintf("read() -> %q", out.value)
		}
		return fmt.Sprintf("cas(%q -> %q) -> ok=%v unknown=%v", in.expect, in.newValue, out.ok, out.unknown)
	},
}

// TestSettingsCASLinearizable: clients read (linearizable reads) and
// compare-and-set one setting through random nodes while the leader is
// killed; porcupine checks the recorded history.
func TestSettingsCASLinearizable(t *testing.T) {
	nodes := startCluster(t, 3, "")
	leader := waitLeader(t, nodes, 5*time.Second)
	const key = "register"
	var dead atomic.Pointer[Member]
	pick := func() *Member {
		for {
			m := nodes[rand.IntN(len(nodes))]
			if m != dead.Load() {
				return m
			}
		}
	}
	read := func(ctx context.Context, m *Member) (uint64, string, error) {
		if err := m.ConsistentRead(ctx); err != nil {
			return 0, "", err
		}
		var s *pb.Setting
		m.fsm.Read(func(st *fsm.State) { s, _ = st.Setting(key) })
		return s.GetVersion(), string(s.GetValue()), nil
	}

	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var ops []porcupine.Operation
	record := func(op porcupine.Operation) {
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var applied, conflicts, unknown atomic.Int64
	for c := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var version uint64
			var value string
			for i := 0; ctx.Err() == nil; i++ {
				m := pick()
				opCtx, opCancel := context.WithTimeout(context.Background(), 6*time.Second)
				if rand.IntN(2) == 0 {
					call := now()
					v, val, err := read(opCtx, m)
					ret := now()
					if err == nil {
						version, value = v, val
						record(porcupine.Operation{ClientId: c, Input: casInput{read: true}, Call: call, Output: casOutput{value: val}, Return: ret})
					}
				} else {
					newValue := fmt.Sprintf("c%d-%d", c, i)
					in := casInput{expect: value, newValue: newValue}
					call := now()
					_, err := m.Apply(opCtx, &pb.SettingPut{Key: key, Value: []byte(newValue), Cas: true, ExpectVersion: version})
					ret := now()
					out := casOutput{ok: err == nil}
					switch {
					case err == nil:
						applied.Add(1)
					case errors.Is(err, fsm.ErrConflict):
						conflicts.Add(1)
					default:
						unknown.Add(1)
						out.unknown, ret = true, math.MaxInt64
					}
					record(porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				}
				opCancel()
			}
		}()
	}
	time.Sleep(time.Second)
	dead.Store(leader)
	leader.Close()
	wg.Wait()
	t.Logf("%d operations: %d CAS applied, %d conflicts, %d unknown outcomes", len(ops), applied.Load(), conflicts.Load(), unknown.Load())
	if applied.Load() == 0 || conflicts.Load() == 0 {
		t.Fatalf("the workload did not exercise CAS: %d applied, %d conflicts", applied.Load(), conflicts.Load())
	}
	model := casModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("fusion-cas-%d.html", time.Now().UnixNano()))
		_ = porcupine.VisualizePath(model, info, path)
		t.Fatalf("history is %s; visualization in %s", res, path)
	}
}
