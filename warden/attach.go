package warden

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// attach is `stockade-warden attach SOCKET`: the bridge a second, short
// Docker exec runs so that a runtime which lost its first link (it crashed,
// or Docker dropped the exec's streams) reaches the warden again. It copies
// stdin to the socket and the socket to stdout; stdin's end half-closes the
// socket, and the socket's end ends the bridge.
//
// The socket lives in the workload's /tmp, where a program of the workload
// (same uid) could rename it and listen in its place, relaying to the real
// warden to read or change the link. So the bridge refuses a listener whose
// pid (SO_PEERCRED, taken by the kernel at listen) is not the one in the
// socket's name: while the warden lives, no other process has its pid. A
// listener that took a dead warden's pid fails the handshake's proof
// (warden.Proof), since only the warden holds the secret.
func attach(path string) int {
	// It carries an authenticated link: the workload (same uid) must not
	// ptrace it either.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden attach: PR_SET_DUMPABLE: %v\n", err)
	}
	want, err := socketPID(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden attach: %v\n", err)
		return 2
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden attach: %v\n", err)
		return 1
	}
	if err := checkListener(c, want); err != nil {
		_ = c.Close() // refused: the check's error is the one to report
		fmt.Fprintf(os.Stderr, "stockade-warden attach: %s: %v\n", path, err)
		return 1
	}
	go func() {
		if _, err := io.Copy(c, os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "stockade-warden attach: relaying stdin: %v\n", err)
		}
		// Tells the warden no more comes; if the link is gone, the copy
		// below reports it.
		_ = c.CloseWrite()
	}()
	if _, err := io.Copy(os.Stdout, c); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden attach: %v\n", err)
		return 1
	}
	return 0
}

// socketPID reads the warden's pid from its socket's name,
// .stockade-warden-<pid>.sock.
func socketPID(path string) (int, error) {
	name := filepath.Base(path)
	s, ok := strings.CutPrefix(name, ".stockade-warden-")
	if ok {
		s, ok = strings.CutSuffix(s, ".sock")
	}
	pid, err := strconv.Atoi(s)
	if !ok || err != nil || pid <= 0 || strconv.Itoa(pid) != s {
		return 0, fmt.Errorf("%q is not a warden's socket (.stockade-warden-<pid>.sock)", path)
	}
	return pid, nil
}

// checkListener refuses a connection whose listener is not process pid of
// our own uid.
func checkListener(c *net.UnixConn, pid int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if gerr != nil {
		return fmt.Errorf("reading the listener's credentials: %w", gerr)
	}
	if int(cred.Pid) != pid || int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("the listener is pid %d uid %d, not the warden (pid %d uid %d): refused", cred.Pid, cred.Uid, pid, os.Getuid())
	}
	return nil
}
