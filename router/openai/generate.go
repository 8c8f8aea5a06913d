package openai

import (
	"context"
	"sync"

	"fusion/engine"
)

// indexedEvent is an event of choice Index.
type indexedEvent struct {
	Index int
	engine.Event
}

// startAll admits every request of a plan and merges their events into one
// channel, closed when every generation has ended. If one request is
// refused, the error is returned and the caller must cancel ctx to stop
// those already admitted. Cancelling ctx at any time stops everything; the
// forwarding goroutines then drain the engine's channels until it closes
// them.
func startAll(ctx context.Context, generate func(context.Context, *engine.Request) (<-chan engine.Event, error), reqs []*engine.Request) (<-chan indexedEvent, error) {
	out := make(chan indexedEvent, len(reqs))
	var wg sync.WaitGroup
	var err error
	for i, r := range reqs {
		var ch <-chan engine.Event
		ch, err = generate(ctx, r)
		if err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				select {
				case out <- indexedEvent{i, ev}:
				case <-ctx.Done():
					for range ch {
					}
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	if err != nil {
		return nil, err
	}
	return out, nil
}
