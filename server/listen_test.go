package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
)

func TestListen(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T) string // returns the socket path
		want    spec.Code
	}{
		{"fresh", func(t *testing.T) string { return filepath.Join(privateDir(t), "j.sock") }, ""},
		{"missing directory made 0700", func(t *testing.T) string { return filepath.Join(privateDir(t), "a", "j.sock") }, ""},
		{"stale socket replaced", func(t *testing.T) string {
			p := filepath.Join(privateDir(t), "j.sock")
			l, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			// The file stays, nobody answers: a crashed server's.
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			return p
		}, ""},
		{"path too long", func(t *testing.T) string {
			return filepath.Join(privateDir(t), strings.Repeat("s", server.MaxSocketPath)+".sock")
		}, spec.CodeInvalidArgument},
		{"directory open to others", func(t *testing.T) string {
			d := privateDir(t)
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, "j.sock")
		}, spec.CodeInvalidArgument},
		{"a file that is not a socket", func(t *testing.T) string {
			p := filepath.Join(privateDir(t), "j.sock")
			if err := os.WriteFile(p, []byte("mine"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, spec.CodeConflict},
		{"a socket another server answers on", func(t *testing.T) string {
			p := filepath.Join(privateDir(t), "j.sock")
			l, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() }) // teardown
			return p
		}, spec.CodeConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.prepare(t)
			lis, err := server.Listen(p, nil)
			if tc.want != "" {
				if !spec.IsCode(err, tc.want) {
					t.Fatalf("got %v, want %s", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lis.Close() }() // teardown
			st, err := os.Stat(p)
			if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
				t.Fatalf("socket %v: %v, want a 0600 socket", st.Mode(), err)
			}
			dir, err := os.Stat(filepath.Dir(p))
			if err != nil || dir.Mode().Perm() != 0o700 {
				t.Fatalf("directory %v: %v, want 0700", dir.Mode(), err)
			}
		})
	}
}

// TestListenRefusesADirectoryAnotherUIDOwns: a 0700 socket directory that
// another user owns is refused, naming it, its owner, the server's uid and
// what to do; nothing is bound. (Its owner could move the socket aside and
// listen in its place: the impostor, which got a sandbox's
// --env API_TOKEN.)
func TestListenRefusesADirectoryAnotherUIDOwns(t *testing.T) {
	dir := testenv.ForeignDir(t, "nobody")
	p := filepath.Join(dir, "j.sock")
	lis, err := server.Listen(p, nil)
	if err == nil {
		_ = lis.Close() // the test fails anyway
		t.Fatalf("Listen in a directory uid %d owns: got a listener, want invalid_argument", testenv.Nobody)
	}
	if !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("got %v, want invalid_argument", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("uid %d", testenv.Nobody), fmt.Sprintf("uid %d", os.Geteuid()), "chown", server.SocketEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("the refused Listen left %s: %v", p, err)
	}
}

// TestListenBindsInTheDirectoryItChecked: the socket is bound, made 0600
// and removed at Close through the directory Listen opened and checked,
// not its path: a directory renamed away after Listen keeps the socket,
// and the one put in its place gets nothing.
func TestListenBindsInTheDirectoryItChecked(t *testing.T) {
	dir := privateDir(t)
	p := filepath.Join(dir, "j.sock")
	lis, err := server.Listen(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lis.Addr().String() != p {
		t.Errorf("Addr() = %s, want %s", lis.Addr(), p)
	}
	moved := dir + ".moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(moved, "j.sock")); !os.IsNotExist(err) {
		t.Errorf("Close left the socket in the directory it was bound in: %v", err)
	}
}

// openUp makes dir and its n-1 parents (a test's temporary directories)
// enterable by others.
func openUp(t *testing.T, dir string, n int) {
	t.Helper()
	for range n {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dir = filepath.Dir(dir)
	}
}

// peerChildEnv makes the test binary a client that reports whether the
// server at the socket answered it (exit 0: refused, 3: answered).
const peerChildEnv = "STOCKADE_TEST_PEER_SOCKET"

func peerChild(sock string) int {
	c, err := client.Dial(sock)
	if err != nil {
		return 0
	}
	defer func() { _ = c.Close() }() // teardown
	if _, err := c.Sandboxes(context.Background()); err != nil {
		return 0
	}
	return 3
}

// TestPeerOfAnotherUIDRefused: with the socket's file permissions opened
// (so only SO_PEERCRED stands in the way), a client running as another
// uid gets no answer. It needs root to run the client as another user.
func TestPeerOfAnotherUIDRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	fx := serve(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy of this binary that another user can run.
	dir := t.TempDir()
	openUp(t, dir, 2)
	bin := filepath.Join(dir, "peer")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, in)
	_ = in.Close() // only read
	if cerr := out.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	openUp(t, filepath.Dir(fx.socket), 3)
	if err := os.Chmod(fx.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		uid  uint32
		want int
	}{
		{"nobody", 65534, 0},
		{"root", 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run=^$")
			cmd.Env = append(os.Environ(), peerChildEnv+"="+fx.socket)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tc.uid, Gid: tc.uid}}
			outb, err := cmd.CombinedOutput()
			code := cmd.ProcessState.ExitCode()
			if code != tc.want {
				t.Fatalf("client as uid %d exited %d (%v, %s), want %d", tc.uid, code, err, outb, tc.want)
			}
		})
	}
}

// TestDialOddPaths: the client dials the socket path as it is, relative or
// with characters a URL would misread ('#', '?', '%').
func TestDialOddPaths(t *testing.T) {
	fx := serve(t)
	dir := filepath.Dir(fx.socket)
	for _, name := range []string{"a#b.sock", "c?d.sock", "100%x.sock"} {
		t.Run(name, func(t *testing.T) {
			odd := filepath.Join(dir, name)
			if err := os.Symlink(fx.socket, odd); err != nil {
				t.Fatal(err)
			}
			c, err := client.Dial(odd)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }() // teardown
			if _, err := c.Sandboxes(context.Background()); err != nil {
				t.Fatalf("a call through %s: %v", name, err)
			}
		})
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Later tests run in wd.
		if err := os.Chdir(wd); err != nil {
			t.Error(err)
		}
	}()
	c, err := client.Dial(filepath.Base(fx.socket))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }() // teardown
	if _, err := c.Sandboxes(context.Background()); err != nil {
		t.Fatalf("a call through a relative path: %v", err)
	}
}
