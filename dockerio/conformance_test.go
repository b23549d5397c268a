package dockerio_test

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/profile"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/dockerio/enginetest"
)

// TestFakeConformance runs the Engine conformance suite against the Fake:
// the suite the Adapter passes against Docker (test/dockerio/), so the Fake the
// actors' tests stand on behaves as Docker does.
func TestFakeConformance(t *testing.T) {
	p, err := profile.Lookup(profile.Default)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Run(t, func(t *testing.T) enginetest.Target {
		f := dockerio.NewFake(p)
		f.Script = enginetest.Commands
		return enginetest.Target{Engine: f, Owner: "fakeowner", Image: "sha256:" + strings.Repeat("ab", 32)}
	})
}
