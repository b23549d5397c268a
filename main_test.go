package stockade_test

import (
	"os"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// TestMain keeps every test away from the user's real state: a test that
// forgot Options.Journal would open a journal in a temporary directory, not
// under the user's HOME.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
