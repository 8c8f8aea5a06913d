//go:build !linux && !darwin

package prefixcache

// TotalMemory is the machine's RAM in bytes (0 when unknown).
func TotalMemory() uint64 { return 0 }
