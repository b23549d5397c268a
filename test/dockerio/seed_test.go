package dockerio

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// seedPayload is a warden "binary" for the seed: its bytes, an error, or a
// wait for release before either (a seed held in flight).
type seedPayload struct {
	bin     []byte
	err     error
	release chan struct{}
}

func (p seedPayload) Bytes() ([]byte, error) {
	if p.release != nil {
		<-p.release
	}
	return p.bin, p.err
}

// TestDockerioSeed: the workspace's seed, which runs beside the workload's
// create and start, is done when StartSandbox returns (work/ owned by the
// sandbox's user, the warden's binary root-owned and execute-only); a seed
// that fails fails the start; and a removal while a seed is in flight
// leaves nothing behind.
func TestDockerioSeed(t *testing.T) {
	e := testkit.NewDio(t)
	bin := []byte("#!/bin/sh\n# not a warden: only delivered\n")
	for _, tc := range []struct {
		name    string
		payload seedPayload
		// remove: remove right after the create, the seed still held
		remove   bool
		startErr string // "" when the start succeeds
	}{
		{name: "seeded when the start returns", payload: seedPayload{bin: bin}},
		{name: "a failed seed fails the start", payload: seedPayload{err: errors.New("payload refused")}, startErr: "reading the warden binary"},
		{name: "removed while the seed is in flight", payload: seedPayload{bin: bin, release: make(chan struct{})}, remove: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := dockerio.NewAdapter(dockerio.Options{WardenBinary: tc.payload})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = a.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s := e.Spec(nil)
			sb, err := a.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: testkit.NewID(), Spec: s})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if tc.remove {
				done := make(chan error, 1)
				go func() { done <- a.RemoveSandbox(ctx, sb) }()
				close(tc.payload.release)
				if err := <-done; err != nil {
					t.Fatalf("remove with the seed in flight: %v", err)
				}
				if rs := e.Leftovers(t); len(rs) != 0 {
					t.Fatalf("left behind: %+v", rs)
				}
				return
			}
			err = a.StartSandbox(ctx, sb)
			switch {
			case tc.startErr == "" && err != nil:
				t.Fatalf("start: %v", err)
			case tc.startErr != "" && (!spec.IsCode(err, spec.CodeEngine) || !strings.Contains(err.Error(), tc.startErr)):
				t.Fatalf("start: %v, want engine saying %q", err, tc.startErr)
			case tc.startErr == "":
				checkSeeded(t, e, sb, s.Policy.User, bin)
			}
			if err := a.RemoveSandbox(ctx, sb); err != nil {
				t.Fatalf("remove: %v", err)
			}
			if rs := e.Leftovers(t); len(rs) != 0 {
				t.Fatalf("left behind: %+v", rs)
			}
		})
	}
}

// checkSeeded reads the workspace through the export container with the
// test's own client: work/ is the sandbox user's, the warden's directory
// and binary root's, the binary execute-only with the payload's bytes.
func checkSeeded(t *testing.T, e *testkit.DioEnv, sb dockerio.Sandbox, u spec.User, bin []byte) {
	t.Helper()
	rc, _, err := e.Docker.CopyFromContainer(context.Background(), sb.Export, dockerio.WorkspaceDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	want := map[string]bool{"workspace/work": false, "workspace/.stockade/stockade-warden": false}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		switch name {
		case "workspace/work":
			want[name] = h.Typeflag == tar.TypeDir && int64(h.Uid) == u.UID && int64(h.Gid) == u.GID
		case "workspace/.stockade/stockade-warden":
			got, err := io.ReadAll(tr)
			want[name] = err == nil && h.Uid == 0 && h.Mode&0o7777 == 0o111 && string(got) == string(bin)
		}
	}
	for name, ok := range want {
		if !ok {
			t.Errorf("%s is missing or not as seeded", name)
		}
	}
}
