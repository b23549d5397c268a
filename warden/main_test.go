package warden

import (
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("STOCKADE_RETIRE_TEST_SERVE") == "1" {
		// A stand-in warden server for TestRetireHere: it waits to be
		// retired.
		time.Sleep(time.Hour)
	}
	os.Exit(m.Run())
}
