package openclaw

import "sync"

// hub fans the store's changes out to the event streams open on this
// node, by session. It subscribes to the store once; delivery never
// blocks the store: a stream whose buffer is full is dropped (its channel
// closed, lagged set) and the client reconnects for a fresh snapshot.
type hub struct {
	buffer int

	mu       sync.Mutex
	byID     map[string]map[*watcher]struct{}
	shutdown bool
}

// watcher is one stream's view of a session.
type watcher struct {
	id string
	ch chan Change // closed after a Closed change, on lag or on shutdown
	// Set before ch is closed, read after.
	lagged bool
}

func newHub(buffer int) *hub {
	return &hub{buffer: buffer, byID: map[string]map[*watcher]struct{}{}}
}

// publish delivers c to the watchers of its session (the store calls it).
func (h *hub) publish(c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.byID[c.Session.ID]
	for w := range set {
		select {
		case w.ch <- c:
		default:
			w.lagged = true
			h.dropLocked(w)
			continue
		}
		if c.Kind == Closed {
			h.dropLocked(w)
		}
	}
}

// watch starts watching session id; ok is false once the hub is shut down.
func (h *hub) watch(id string) (w *watcher, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		return nil, false
	}
	w = &watcher{id: id, ch: make(chan Change, h.buffer)}
	set := h.byID[id]
	if set == nil {
		set = map[*watcher]struct{}{}
		h.byID[id] = set
	}
	set[w] = struct{}{}
	return w, true
}

// unwatch stops w (idempotent).
func (h *hub) unwatch(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(w)
}

func (h *hub) dropLocked(w *watcher) {
	set := h.byID[w.id]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(h.byID, w.id)
	}
	close(w.ch)
}

// close ends every stream and refuses new ones (the server is draining).
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shutdown = true
	for _, set := range h.byID {
		for w := range set {
			h.dropLocked(w)
		}
	}
}

// watching reports how many streams watch session id (for tests).
func (h *hub) watching(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byID[id])
}
