package dockerio

import (
	"context"
	"strings"
	"testing"

	"github.com/stockade/stockade/profile"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/test/testkit"
)

func TestDockerioLifecycle(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	if got := e.Sh(t, sb, "id"); !strings.HasPrefix(got, "uid=65532") {
		t.Fatalf("id: %q", got)
	}
	if err := e.Adapter.RemoveSandbox(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	if rs := e.Leftovers(t); len(rs) != 0 {
		t.Fatalf("left behind: %+v", rs)
	}
}

// TestDockerioPreflightReal: the named profile admits this daemon, the
// client is pinned to the profile's API version (not the v28 default 1.51),
// the daemon id is reported, and doctor prints every check.
func TestDockerioPreflightReal(t *testing.T) {
	e := testkit.NewDio(t)
	ctx := context.Background()
	d, err := e.Adapter.Preflight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := e.Adapter.Profile()
	if d.ID == "" || d.Revision != p.Revision() || d.APIVersion != p.APIVersion || e.Adapter.ClientVersion() != p.APIVersion {
		t.Fatalf("daemon %+v, client drives %s, profile %s", d, e.Adapter.ClientVersion(), p.APIVersion)
	}
	info, err := e.Docker.Info(ctx)
	if err != nil || info.ID != d.ID {
		t.Fatalf("daemon id %q, /info says %q (%v)", d.ID, info.ID, err)
	}
	r, err := dockerio.Doctor(ctx, p.Name)
	if err != nil || !r.OK() || len(r.Checks) < 20 {
		t.Fatalf("doctor: %+v %v", r, err)
	}
	var b strings.Builder
	_, _ = r.WriteTo(&b) // a bytes.Buffer: never fails
	t.Logf("doctor:\n%s", b.String())
	if p.Name != profile.Default {
		// The default profile is named, never chosen by probing: against
		// this daemon it must refuse, and say why.
		def, err := dockerio.Doctor(ctx, profile.Default)
		if err != nil {
			t.Fatal(err)
		}
		if def.OK() {
			t.Logf("the default profile admits this daemon too")
		} else {
			t.Logf("default profile refuses: %v", def.Err())
		}
	}
}
