package warden

import "golang.org/x/sys/unix"

// arm64 has only the *at forms of the path syscalls: the others are -1
// (distinct negatives would be needed in a switch, so they are spread).
const (
	nativeArch   = unix.AUDIT_ARCH_AARCH64
	sysOpen      = -1
	sysCreat     = -2
	sysUnlink    = -3
	sysRename    = -4
	sysRenameat  = unix.SYS_RENAMEAT
	sysMkdir     = -5
	sysRmdir     = -6
	sysLink      = -7
	sysSymlink   = -8
	sysMknod     = -9
	sysChmod     = -10
	sysChown     = -11
	sysLchown    = -12
	sysOpenat2   = unix.SYS_OPENAT2
	sysFchmodat2 = unix.SYS_FCHMODAT2
)
