package dockerio

import (
	"testing"

	"github.com/stockade/stockade/dockerio/enginetest"
	"github.com/stockade/stockade/test/testkit"
)

// TestDockerioConformance runs the Engine conformance suite against the
// real Adapter (the suite the Fake passes in dockerio's unit tests): what
// the Fake is believed to do, Docker does. Each subtest has an owner of its
// own, whose resources are removed when it ends; under CI=true it fails
// when the daemon does not answer (dockertest.Client).
func TestDockerioConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) enginetest.Target {
		e := testkit.NewDio(t)
		return enginetest.Target{Engine: e.Adapter, Owner: e.Owner, Image: e.Image}
	})
}

// TestDockerioConformanceWarden runs the conformance suite's warden test
// against an Adapter that delivers the real warden: the seam the Fake's
// in-process warden stands in for, start, spawn, reattach and retire.
func TestDockerioConformanceWarden(t *testing.T) {
	enginetest.RunWardens(t, func(t *testing.T) enginetest.Target {
		e := newWardenDio(t)
		return enginetest.Target{Engine: e.Adapter, Owner: e.Owner, Image: e.Image}
	})
}
