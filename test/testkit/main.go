package testkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/testenv"
)

// Main is the TestMain of every suite under test/. It keeps the tests, and
// the drill's child runtimes, away from the user's real state: HOME, the XDG
// directories and STOCKADE_JOURNAL point at a fresh temporary directory,
// removed when the tests end, and the warden and egress helpers are built
// from the current source (testenv.Isolate, as testenv.Run does). The daemon
// stays reachable (DOCKER_HOST is left alone) and `go build` keeps the real
// Go caches. Whether the daemon answers is each test's own question (the
// fixtures ask internal/dockertest).
//
// The suites' tests then run one package at a time (OneAtATime): go test
// runs several packages' test binaries at once, and the suites, written to
// run one after another on one daemon, must not share it and two cores with
// each other.
func Main(m *testing.M) {
	cleanup, err := testenv.Isolate()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: isolating the environment: %v\n", err)
		os.Exit(1)
	}
	unlock, err := OneAtATime()
	if err != nil {
		cleanup()
		fmt.Fprintf(os.Stderr, "testkit: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	unlock()
	cleanup()
	os.Exit(code)
}

// OneAtATime blocks until no other suite of this checkout is running its
// tests, and returns the function that lets the next one go. The lock is an
// flock on the checkout's test/ directory itself: no file to make, none left
// behind, one lock per checkout; the kernel drops it when the process ends,
// however it ends. A suite that waits says so on stderr.
//
// It serializes what one `go test ./...` (or ./test/...) would otherwise run
// at once: the suites were one package whose tests ran one after another,
// and two of them at once on a two-core machine would slow each other's
// bounded waits toward their deadlines and share the daemon's network pools
// and the machine's memory with each other's attacks and floods. Building
// and linking the next suite still overlaps the running one.
func OneAtATime() (unlock func(), err error) {
	root, err := dockertest.ModuleRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "test")
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("the suites' lock: %w", err)
	}
	fd := int(d.Fd())
	err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		fmt.Fprintf(os.Stderr, "testkit: another suite of %s is running; waiting for it\n", root)
		err = syscall.Flock(fd, syscall.LOCK_EX)
	}
	if err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("the suites' lock on %s: %w", dir, err)
	}
	return func() { _ = d.Close() }, nil // closing the directory drops the lock
}
