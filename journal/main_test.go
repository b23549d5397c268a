package journal

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path, os.Getenv(crashRunEnv))
		os.Exit(0)
	}
	code := m.Run()
	removeFixtures()
	os.Exit(code)
}
