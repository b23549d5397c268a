package journal

import (
	"os"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path, os.Getenv(crashRunEnv))
		os.Exit(0)
	}
	// No test may read or write the user's real journal (statedir.DefaultJournal).
	code := testenv.Run(m)
	removeFixtures()
	os.Exit(code)
}
