package server_test

import (
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// TestValidationSameBothWays: a process spec the embedded runtime refuses
// is refused served too, with the same code and message (a stream that is
// neither pipe nor discard is not sent as a pipe).
func TestValidationSameBothWays(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	served, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := fx.rt.Sandbox(ctx, served.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    spec.Process
	}{
		{"stdout tty", spec.Process{Argv: []string{"true"}, Stdout: "tty"}},
		{"stderr a file", spec.Process{Argv: []string{"true"}, Stderr: "/tmp/x"}},
		{"no argv", spec.Process{}},
		{"negative timeout", spec.Process{Argv: []string{"true"}, Timeout: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, eerr := embedded.Start(ctx, tc.p)
			_, serr := served.Start(ctx, tc.p)
			if !spec.IsCode(eerr, spec.CodeInvalidArgument) {
				t.Fatalf("embedded: %v, want invalid_argument", eerr)
			}
			if !spec.IsCode(serr, spec.CodeInvalidArgument) || serr.Error() != eerr.Error() {
				t.Fatalf("served: %v\nembedded: %v\nwant the same refusal", serr, eerr)
			}
		})
	}
}
