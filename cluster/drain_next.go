//go:build fusion_next

package cluster

// DrainNext, in a build with the fusion_next tag, adds a field to the
// replicated drain record that the normal build does not know: the
// rolling-upgrade test (cmd/fusion) runs such a build next to normal ones
// to show an old node keeps a new node's field through its own writes.
type DrainNext struct {
	Reason string `json:"reason,omitempty"` // why the node is drained
}

func (n DrainNext) apply(r *DrainRecord) {
	if n.Reason != "" {
		r.Reason = n.Reason
	}
}

// set reports whether apply changes a record already draining.
func (n DrainNext) set() bool { return n.Reason != "" }
