// Package race lets a hot loop marked //go:norace keep the race
// detector's view of the memory it touches: the loop, uninstrumented,
// runs at full speed under -race, and its caller declares the ranges the
// loop reads and writes with ReadRange and WriteRange, one detector call
// per range instead of one per element. Without -race both are empty and
// inlined away.
//
// A loop may go uninstrumented only when every byte it touches is
// declared that way or belongs to the calling goroutine alone (its own
// scratch): the detector then sees the same conflicts it saw before, at
// the granularity of the range.
package race
