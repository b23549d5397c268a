package warden

import "golang.org/x/sys/unix"

// The path syscalls x86_64 has and arm64 lacks (arm64 has only their *at
// forms).
const (
	nativeArch   = unix.AUDIT_ARCH_X86_64
	sysOpen      = unix.SYS_OPEN
	sysCreat     = unix.SYS_CREAT
	sysUnlink    = unix.SYS_UNLINK
	sysRename    = unix.SYS_RENAME
	sysRenameat  = unix.SYS_RENAMEAT
	sysMkdir     = unix.SYS_MKDIR
	sysRmdir     = unix.SYS_RMDIR
	sysLink      = unix.SYS_LINK
	sysSymlink   = unix.SYS_SYMLINK
	sysMknod     = unix.SYS_MKNOD
	sysChmod     = unix.SYS_CHMOD
	sysChown     = unix.SYS_CHOWN
	sysLchown    = unix.SYS_LCHOWN
	sysOpenat2   = unix.SYS_OPENAT2
	sysFchmodat2 = unix.SYS_FCHMODAT2
)
