//go:build !linux && !darwin

package hub

import "errors"

// FreeBytes is unknown on this system: the space check is skipped.
func FreeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }
