//go:build linux || darwin

package hub

import "syscall"

// FreeBytes is the space an unprivileged process may still write on the
// file system holding dir.
func FreeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:unconvert // field types differ by OS
}
