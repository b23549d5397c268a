package client_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/spec"
)

// TestDialRefusesADirectoryAnotherUIDOwns: like ssh with a file another
// user could have replaced, the client refuses a socket whose directory
// another user (not root) owns: whoever answers there may be an impostor
// that moved the server's socket aside, and a create's environment (an
// API token) would go to it. The error names the directory, its owner and
// this user.
func TestDialRefusesADirectoryAnotherUIDOwns(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to chown a directory to another uid; CI must run it as root")
		}
		t.Skip("needs root to chown a directory to another uid")
	}
	const nobody = 65534
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "journal.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }() // teardown
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close() // the impostor: only the connection matters here
		}
	}()
	// The impostor's directory: a 0700 one its owner made.
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(sock)
	if err == nil {
		_ = c.Close() // the test fails anyway
		t.Fatalf("Dial of a socket in a directory uid %d owns: connected, want invalid_argument", nobody)
	}
	if !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("got %v, want invalid_argument", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("uid %d", nobody), fmt.Sprintf("uid %d", os.Geteuid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
}
