package server_test

import (
	"testing"

	"github.com/stockade/stockade/host/hosttest"
)

// TestConformance runs host.Runtime's conformance suite through the
// embedded runtime and through the client of its server, on the Fake.
func TestConformance(t *testing.T) {
	fx := serve(t)
	fx.fake.Script = hosttest.Script
	hosttest.Run(t, hosttest.Target{
		Ways:  []hosttest.Way{{Name: "embedded", Runtime: fx.rt.Host()}, {Name: "served", Runtime: fx.c}},
		Image: fakeImage,
	})
}
