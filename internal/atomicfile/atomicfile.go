// Package atomicfile writes a file so that readers see either the old
// contents or the complete new ones: the data go to a temporary file in
// the same directory, which is synced and renamed over the target.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates path (mode 0644) with what write produces. On any error the
// temporary file is removed and path is left untouched.
func Write(path string, write func(w io.Writer) error) error {
	return WriteMode(path, 0o644, write)
}

// WriteMode is Write with the file's permission bits (0600 for a secret).
func WriteMode(path string, mode os.FileMode, write func(w io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
