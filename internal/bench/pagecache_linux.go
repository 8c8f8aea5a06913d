package bench

import (
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// dropPageCache asks the kernel to drop the cached pages of the files
// under dir, so the next reads come from the device. It reports whether
// every file took the advice.
func dropPageCache(dir string) bool {
	ok := true
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			ok = false
			return nil
		}
		defer f.Close()
		if unix.Fdatasync(int(f.Fd())) != nil || unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) != nil {
			ok = false
		}
		return nil
	})
	return ok
}
