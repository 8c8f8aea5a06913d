//go:build !linux

package bench

// dropPageCache is not available here: the SSD figure is then read
// through the page cache.
func dropPageCache(dir string) bool { return false }
