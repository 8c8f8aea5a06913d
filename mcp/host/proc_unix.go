//go:build unix

package host

import (
	"os/exec"
	"syscall"
)

// ownGroup starts the command in a process group of its own, so the
// whole tree it starts can be signalled at once and a terminal's Ctrl-C
// reaches fusion only (which then stops its servers in order).
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signalGroup signals the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
