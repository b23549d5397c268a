//go:build !linux

package warden

import "syscall"

// forkTracked without seccomp user notification: the child runs untracked.
func forkTracked(t *tracker, argv0 string, argv []string, attr *syscall.ProcAttr) (int, error) {
	t.untracked = "seccomp user notification is Linux only"
	return syscall.ForkExec(argv0, argv, attr)
}
