//go:build !fusion_next

package cluster

// DrainNext is empty in a normal build: see drain_next.go.
type DrainNext struct{}

func (DrainNext) apply(*DrainRecord) {}

// set reports whether apply changes a record already draining.
func (DrainNext) set() bool { return false }
