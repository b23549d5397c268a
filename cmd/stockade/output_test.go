package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// failingWriter fails every write, as a full disk or a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestOutputWriteFailureFails: a command whose output cannot be written
// fails (exit 1, the write error on stderr) instead of exiting 0.
func TestOutputWriteFailureFails(t *testing.T) {
	for _, args := range [][]string{
		{"help"},
		{"help", "run"},
		{"completion", "bash"},
		{"completion", "fish"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var errb bytes.Buffer
			code := dispatch(context.Background(), args, nil, failingWriter{}, &errb)
			if code != 1 || !strings.Contains(errb.String(), "stream_failure: writing the output: no space left on device") {
				t.Fatalf("exit %d, stderr %q; want 1 and the write error", code, errb.String())
			}
			var out bytes.Buffer
			errb.Reset()
			if code := dispatch(context.Background(), args, nil, &out, &errb); code != 0 || out.Len() == 0 || errb.Len() != 0 {
				t.Fatalf("to a working stdout: exit %d, %d bytes out, stderr %q", code, out.Len(), errb.String())
			}
		})
	}
}
