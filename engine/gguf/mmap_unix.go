//go:build unix

package gguf

import (
	"fmt"
	"os"
	"syscall"
)

// mmapFile maps size bytes of f read-only and shared.
func mmapFile(f *os.File, size int) ([]byte, func() error, error) {
	buf, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return buf, func() error { return syscall.Munmap(buf) }, nil
}
