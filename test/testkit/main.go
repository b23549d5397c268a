package testkit

import (
	"os"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// Main is the TestMain of every suite under test/. It keeps the tests, and
// the drill's child runtimes, away from the user's real state: HOME, the XDG
// directories and STOCKADE_JOURNAL point at a fresh temporary directory,
// removed when the tests end, and the warden and egress helpers are built
// from the current source (internal/testenv). The daemon stays reachable
// (DOCKER_HOST is left alone) and `go build` keeps the real Go caches.
//
// Whether the daemon answers is each test's own question (the fixtures ask
// internal/dockertest), so a suite's tests that need no daemon still run.
func Main(m *testing.M) { os.Exit(testenv.Run(m)) }
