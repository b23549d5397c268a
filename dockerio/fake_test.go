package dockerio

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// TestFakeOwnModes covers what the Fake does that Docker cannot be asked to
// (its fault injection) and where it differs on purpose; what it shares
// with Docker is the conformance suite's (enginetest, conformance_test.go).
func TestFakeOwnModes(t *testing.T) {
	p, _ := profile.Lookup(profile.Default)
	boom := errors.New("boom")
	mk := func(t *testing.T) (*Fake, Sandbox) {
		f := NewFake(p)
		f.Script = func(sb Sandbox, req ExecRequest) FakeRun {
			return FakeRun{StartFailure: "exec: " + req.Spec.Argv[0] + ": not found"}
		}
		ctx := context.Background()
		sb, err := f.CreateSandbox(ctx, SandboxRequest{Owner: "o", ID: "s", Spec: spec.Sandbox{Image: fixtureImage, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.StartSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return f, sb
	}
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, f *Fake, sb Sandbox) error
		code spec.Code
		is   error
	}{
		{"StartFailure fails the attach", func(ctx context.Context, f *Fake, sb Sandbox) error {
			req := ExecRequest{ProcessID: "p", Spec: spec.Process{Argv: []string{"nope"}, Stdout: spec.Pipe, Stderr: spec.Pipe}}
			id, err := f.CreateExec(ctx, sb, req)
			if err != nil {
				return err
			}
			_, err = f.AttachExec(ctx, sb, id, req)
			return err
		}, spec.CodeExecFailed, nil},
		{"Fault is returned instead", func(ctx context.Context, f *Fake, sb Sandbox) error {
			f.Fault = func(op string) error {
				if op == "StopSandbox" {
					return spec.Wrap(spec.CodeEngine, "fake", boom, "injected")
				}
				return nil
			}
			_, err := f.StopSandbox(ctx, sb, 0)
			return err
		}, spec.CodeEngine, boom},
		{"a done ctx is cancelled", func(ctx context.Context, f *Fake, sb Sandbox) error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err := f.ListOwned(cctx, "o")
			return err
		}, spec.CodeCancelled, context.Canceled},
		{"no warden", func(ctx context.Context, f *Fake, sb Sandbox) error {
			f.NoWarden = true
			_, err := f.StartWarden(ctx, sb, io.Discard)
			return err
		}, spec.CodeUnsupported, nil},
		{"no egress proxy", func(ctx context.Context, f *Fake, sb Sandbox) error {
			sb.Egress = "x1"
			_, err := f.OpenEgress(ctx, sb, io.Discard)
			return err
		}, spec.CodeUnsupported, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, sb := mk(t)
			err := tc.call(context.Background(), f, sb)
			if !spec.IsCode(err, tc.code) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v, want code %s (cause %v)", err, tc.code, tc.is)
			}
		})
	}
	// Every image ID is one the Fake has.
	f, _ := mk(t)
	if id, err := f.ResolveImage(context.Background(), fixtureImage); err != nil || id != fixtureImage {
		t.Errorf("ResolveImage(%s) = %q, %v", fixtureImage, id, err)
	}
}

// TestFakeCreatedNotStarted: the Fake's create leaves the workload created,
// not running, until StartSandbox (the Adapter may begin the start in the
// create, so the conformance suite does not check this).
func TestFakeCreatedNotStarted(t *testing.T) {
	p, _ := profile.Lookup(profile.Default)
	f := NewFake(p)
	ctx := context.Background()
	sb, err := f.CreateSandbox(ctx, SandboxRequest{Owner: "o", ID: "s", Spec: spec.Sandbox{Image: fixtureImage, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := f.InspectSandbox(ctx, sb)
	if err != nil || obs.Running || obs.Exit == nil || obs.Exit.ExitCode != 0 {
		t.Errorf("InspectSandbox, created: %+v, %v; want not running, exit 0", obs, err)
	}
	if err := f.VerifySandbox(ctx, sb); !spec.IsCode(err, spec.CodeUnsupported) {
		t.Errorf("VerifySandbox, not started: %v, want unsupported", err)
	}
	_, err = f.CreateExec(ctx, sb, ExecRequest{ProcessID: "p", Spec: spec.Process{Argv: []string{"true"}, Stdout: spec.Pipe, Stderr: spec.Pipe}})
	if !spec.IsCode(err, spec.CodeConflict) {
		t.Errorf("CreateExec, not started: %v, want conflict", err)
	}
}
