package node

import (
	"context"
	"time"

	"fusion/cluster"
	"fusion/cluster/fsm"
)

// DefaultDrainSettle is how long a drained node must have been idle, and
// gossiped draining, before it reports itself drained (Config.DrainSettle).
const DefaultDrainSettle = 2 * time.Second

// drainPoll is how often a draining node checks what still runs here.
const drainPoll = 250 * time.Millisecond

// followDrain makes this node follow its replicated drain record until
// ctx ends (fusion cluster drain|undrain, from any node): drain → gossip
// and record draining (peers route nothing new here, the planner moves
// its replicas), hand leadership over, and once nothing runs here, no
// placement is here and DrainSettle has passed, write "drained"; undrain
// → serve again.
func (n *Node) followDrain(ctx context.Context) {
	m := n.member
	key := cluster.DrainPrefix + m.ID()
	kick := make(chan struct{}, 1)
	cancel := m.FSM().Subscribe(func(cs []fsm.Change) {
		for _, c := range cs {
			if c.Table == fsm.TableAll || c.Table == fsm.TableSettings && c.Key == key {
				select {
				case kick <- struct{}{}:
				default:
				}
				return
			}
		}
	})
	defer cancel()
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	var (
		draining  bool
		idleSince time.Time // the first check that found nothing here
	)
	for {
		rec, _ := m.Drain(m.ID())
		// The loop acts on changes of the record only (Stop's own
		// draining is not undone here). The gossiped flag is set even
		// when the catalog write fails (a restarted node not yet back in
		// the catalog): the leader copies gossip into the catalog.
		if rec.Drain != draining {
			draining, idleSince = rec.Drain, time.Time{}
			n.setDraining(ctx, draining)
			if draining {
				n.cfg.Logger.Info("cluster: draining (fusion cluster drain)")
			} else {
				n.cfg.Logger.Info("cluster: undrained, serving again")
			}
		}
		if draining && rec.State != cluster.DrainStateDrained {
			idleSince = n.drainStep(ctx, idleSince)
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
	}
}

func (n *Node) setDraining(ctx context.Context, on bool) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.member.SetDraining(rctx, on); err != nil && ctx.Err() == nil {
		n.cfg.Logger.Warn("cluster: set draining (gossiped; the catalog follows)", "draining", on, "err", err)
	}
}

// drainStep moves a drain on: it hands leadership over, and writes the
// record drained once nothing has run or been placed here for
// DrainSettle. It returns when this node was first seen idle (zero: busy).
func (n *Node) drainStep(ctx context.Context, idleSince time.Time) time.Time {
	m := n.member
	led, err := m.TransferLeadership()
	if led {
		n.cfg.Logger.Info("cluster: draining: handing leadership over", "err", err)
	}
	s := n.runner.Stats()
	if s.InFlight > 0 || s.Waiting > 0 || len(m.Assignments()) > 0 || led && m.IsLeader() {
		return time.Time{}
	}
	if idleSince.IsZero() {
		return time.Now()
	}
	if time.Since(idleSince) < n.cfg.DrainSettle {
		return idleSince
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = m.UpdateDrain(rctx, m.ID(), func(r *cluster.DrainRecord) bool {
		if !r.Drain || r.State == cluster.DrainStateDrained {
			return false // undrained meanwhile, or done
		}
		r.State = cluster.DrainStateDrained
		return true
	})
	if err != nil {
		if ctx.Err() == nil {
			n.cfg.Logger.Warn("cluster: drained, not recorded yet", "err", err)
		}
		return idleSince
	}
	n.cfg.Logger.Info("cluster: drained: nothing runs here, safe to stop")
	return idleSince
}
