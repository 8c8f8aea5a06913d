//go:build !unix

package gguf

import (
	"fmt"
	"io"
	"os"
)

// mmapFile falls back to reading where there is no mmap.
func mmapFile(f *os.File, size int) ([]byte, func() error, error) {
	buf := make([]byte, size)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, nil, fmt.Errorf("reading: %w", err)
	}
	return buf, nil, nil
}
