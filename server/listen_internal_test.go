package server

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPeerAllowed(t *testing.T) {
	for _, tc := range []struct {
		peer, self uint32
		want       bool
	}{
		{1000, 1000, true},
		{0, 1000, true},
		{0, 0, true},
		{1001, 1000, false},
		{1000, 0, false},
		{65534, 1000, false},
	} {
		if got := PeerAllowed(tc.peer, tc.self); got != tc.want {
			t.Errorf("PeerAllowed(%d, %d) = %v, want %v", tc.peer, tc.self, got, tc.want)
		}
	}
}

// TestPeerUID: SO_PEERCRED on a connected pair reads this process's uid.
func TestPeerUID(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "a")
	// Teardown.
	defer func() { _ = f.Close() }()
	defer func() { _ = unix.Close(fds[1]) }()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }() // teardown
	uid, err := peerUID(c)
	if err != nil || uid != uint32(os.Getuid()) {
		t.Fatalf("peerUID = %d, %v; want %d", uid, err, os.Getuid())
	}
}
