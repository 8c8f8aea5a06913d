//go:build cgo

package mlx

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include "errors.h"

static void* fusion_mlx_dlopen(const char* path, char** err) {
  void* h = dlopen(path, RTLD_LAZY | RTLD_GLOBAL);
  if (h == NULL) {
    *err = dlerror();
  }
  return h;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// SupportedVersion is the MLX release line the vendored mlx-c source
// (fba4470) is written against; a libmlxc reporting another version is not
// used.
const SupportedVersion = "0.31."

// library is the process's libmlxc: dlopen is process-wide, so it is
// loaded once, at the first Available or Open.
var library struct {
	once    sync.Once
	path    string
	version string
	err     error
}

func load() {
	library.once.Do(func() {
		var tried []string
		for _, p := range searchPaths() {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, p+": not found")
				continue
			}
			version, err := open(p)
			if err != nil {
				// A library that exists but does not load or bind is the
				// answer: a later candidate would hide the problem.
				library.err = err
				return
			}
			library.path, library.version = p, version
			return
		}
		if len(tried) == 0 {
			library.err = errors.New("mlx: libmlxc not found (no candidate paths)")
			return
		}
		library.err = fmt.Errorf("mlx: libmlxc not found (build it with make build-mlx, or set %s): %s", EnvLibrary, strings.Join(tried, "; "))
	})
}

// open dlopens the library at path, binds our declarations, installs the
// error handler before any other call, and checks MLX's version.
func open(path string) (string, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	h := C.fusion_mlx_dlopen(cpath, &cerr)
	if h == nil {
		return "", fmt.Errorf("mlx: dlopen %s: %s", path, C.GoString(cerr))
	}
	var missing *C.char
	if C.fusion_mlx_bind(h, &missing) != 0 {
		return "", fmt.Errorf("mlx: %s has no %s: not an mlx-c library of the supported version", path, C.GoString(missing))
	}
	C.fusion_mlx_install_handler()
	C.fusion_mlx_begin()
	s := C.mlx_string_new()
	defer C.mlx_string_free(s)
	if C.mlx_version(&s) != 0 {
		return "", fmt.Errorf("mlx: %s: mlx_version: %s", path, C.GoString(C.fusion_mlx_error()))
	}
	version := C.GoString(C.mlx_string_data(s))
	if !strings.HasPrefix(version, SupportedVersion) {
		return "", fmt.Errorf("mlx: %s is MLX %s; this build needs %sx", path, version, SupportedVersion)
	}
	return version, nil
}

// Available loads libmlxc if that has not been tried yet, and reports why
// MLX cannot be used, or nil.
func Available() error {
	load()
	return library.err
}

// Library is the path of the loaded libmlxc and the MLX version it
// reports ("" when unavailable).
func Library() (path, version string) {
	load()
	return library.path, library.version
}
