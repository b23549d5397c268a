package test

import (
	"os"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// TestMain keeps these tests, and the drill's child runtimes, away from the
// user's real state: HOME, the XDG directories and STOCKADE_JOURNAL point at
// a fresh temporary directory. The daemon stays reachable (DOCKER_HOST is
// left alone) and `go build` keeps the real Go caches.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
