// Package drilldocker is what the crash drill asks of Docker directly,
// beside the runtime it drills: a sandbox's resources made under a
// journal's owner with an id the journal does not know (an orphan for
// recovery to find), the resources an owner has (what a drill must leave
// as it found them), and an engine without a warden binary (the drill's
// exec mode). It keeps Docker's adapter out of the CLI.
package drilldocker

import (
	"context"
	"io"
	"sort"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/spec"
)

// MakeOrphan makes a one-shot sandbox of image under owner, with a fresh
// id no journal holds.
func MakeOrphan(ctx context.Context, profile, image, owner string) error {
	a, err := dockerio.NewAdapter(dockerio.Options{Profile: profile})
	if err != nil {
		return err
	}
	defer func() { _ = a.Close() }() // its clients only: closing them loses nothing
	if _, err := a.Preflight(ctx); err != nil {
		return err
	}
	id, err := a.ResolveImage(ctx, image)
	if err != nil {
		return err
	}
	sid, err := journal.NewID()
	if err != nil {
		return err
	}
	_, err = a.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: owner, ID: sid,
		Spec: spec.Sandbox{Image: id, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}})
	return err
}

// Owned lists the "kind/id@sandbox" of every resource labelled with
// owner, sorted.
func Owned(ctx context.Context, profile, owner string) ([]string, error) {
	a, err := dockerio.NewAdapter(dockerio.Options{Profile: profile})
	if err != nil {
		return nil, err
	}
	defer func() { _ = a.Close() }() // its clients only: closing them loses nothing
	if _, err := a.Preflight(ctx); err != nil {
		return nil, err
	}
	groups, err := a.ListOwned(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range groups {
		for _, r := range g.Resources {
			out = append(out, string(r.Kind)+"/"+r.ID+"@"+g.Sandbox)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ExecEngine is a Docker engine with no warden binary (every process an
// exec), for stockade.Options.Engine, and what closes it.
func ExecEngine(profile string) (dockerio.Engine, io.Closer, error) {
	a, err := dockerio.NewAdapter(dockerio.Options{Profile: profile})
	if err != nil {
		return nil, nil, err
	}
	return a, a, nil
}
