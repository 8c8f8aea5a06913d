//go:build !unix

package host

import (
	"os"
	"os/exec"
	"syscall"
)

func ownGroup(*exec.Cmd) {}

// signalGroup can only kill the process itself here.
func signalGroup(pid int, sig syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil && sig == syscall.SIGKILL {
		_ = p.Kill()
	}
}
