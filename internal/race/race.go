//go:build race

package race

import (
	"runtime"
	"unsafe"
)

// Enabled reports whether the race detector is on.
const Enabled = true

// ReadRange tells the race detector that the calling goroutine reads
// every element of s.
func ReadRange[T any](s []T) {
	if len(s) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(s)), len(s)*int(unsafe.Sizeof(s[0])))
	}
}

// WriteRange tells the race detector that the calling goroutine writes
// every element of s.
func WriteRange[T any](s []T) {
	if len(s) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(s)), len(s)*int(unsafe.Sizeof(s[0])))
	}
}
