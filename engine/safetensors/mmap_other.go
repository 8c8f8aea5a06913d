//go:build !unix

package safetensors

import (
	"errors"
	"os"
)

func mmapFile(*os.File, int64) ([]byte, error) {
	return nil, errors.New("memory-mapping is not supported on this platform; use the read load mode")
}

func munmap([]byte) error { return nil }
