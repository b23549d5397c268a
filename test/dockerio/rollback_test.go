package dockerio

import (
	"archive/tar"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/helpers"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestDockerioRollbackSteps (issue 30, defects 4 and 5): the rollback's
// steps against the real daemon. Look-alikes of root's marker the
// sandbox's user can make (a directory with the marker's mtime, a file, a
// link to a root-owned directory) are no proof; the kill of the workload
// ends a setsid and a double-forked process, and the restart reads it back
// with a fresh keeper; the staging directory holds root's marker, which the
// user cannot move into work; the
// exchange refuses a workspace whose root another uid owns and renames
// nothing; a proper exchange leaves the proof in work; no exchange
// container is left behind.
func TestDockerioRollbackSteps(t *testing.T) {
	e := newWardenDio(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := e.Sandbox(t, nil)
	const marker = dockerio.MarkerPrefix + "0123456789abcdef"
	stamp := strconv.FormatInt(dockerio.MarkerTime(marker).Unix(), 10)

	// The user's look-alikes in work: none passes.
	e.Sh(t, sb, "cd /workspace/work && mkdir "+marker+" && touch -d @"+stamp+" "+marker)
	if ok, err := e.Adapter.MarkerProof(ctx, sb, "work", marker); err != nil || ok {
		t.Fatalf("a marker the user made passes: %v %v", ok, err)
	}
	e.Sh(t, sb, "cd /workspace/work && rmdir "+marker+" && ln -s /workspace/.stockade "+marker)
	if ok, err := e.Adapter.MarkerProof(ctx, sb, "work", marker); err != nil || ok {
		t.Fatalf("a link to a directory of root's passes: %v %v", ok, err)
	}
	e.Sh(t, sb, "cd /workspace/work && rm "+marker+" && echo hi > "+marker+" && echo old > old.txt")
	if ok, err := e.Adapter.MarkerProof(ctx, sb, "work", marker); err != nil || ok {
		t.Fatalf("a file passes: %v %v", ok, err)
	}
	e.Sh(t, sb, "rm /workspace/work/"+marker)

	// Survivors: a setsid loop and a double-forked sleep. The kill of the
	// workload ends them (and the container's own init and keeper, which
	// start afresh with it); the staging directory is made meanwhile.
	e.Sh(t, sb, "setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & ( ( sleep 1001 </dev/null >/dev/null 2>&1 & ) & ) ; true")
	before := e.Sh(t, sb, "ps -o pid,args")
	if !strings.Contains(before, "sleep 1001") || !strings.Contains(before, "while :; do sleep 1") {
		t.Fatalf("the survivors did not start:\n%s", before)
	}
	if err := e.Adapter.KillWorkload(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if c, err := e.Docker.ContainerInspect(ctx, sb.Workload); err != nil || c.State.Running {
		t.Fatalf("the workload runs after KillWorkload: %v", err)
	}
	if err := e.Adapter.StageRollback(ctx, sb, ".rollback-9", marker); err != nil {
		t.Fatal(err)
	}
	if err := e.Adapter.RestartWorkload(ctx, sb); err != nil {
		t.Fatal(err)
	}
	ps := e.Sh(t, sb, "ps -o pid,args")
	for _, s := range []string{"sleep 1001", "while :; do sleep 1"} {
		if strings.Contains(ps, s) {
			t.Fatalf("%q survived the kill:\n%s", s, ps)
		}
	}
	if !strings.Contains(ps, "while :; do sleep 3600; done") {
		t.Fatalf("the restarted workload has no keeper:\n%s", ps)
	}

	// Staged: root's marker cannot be moved into work by the user.
	e.Sh(t, sb, "echo new > /workspace/.rollback-9/new.txt")
	if r := e.Exec(t, sb, nil, "mv", "/workspace/.rollback-9/"+marker, "/workspace/work/"+marker); r.Code == 0 {
		t.Fatal("the user moved root's marker into work")
	}
	if ok, err := e.Adapter.MarkerProof(ctx, sb, "work", marker); err != nil || ok {
		t.Fatalf("proof before the exchange: %v %v", ok, err)
	}

	// A workspace whose root is not root's 0755 is refused whole: the
	// root is handed to the user by a container of the test's own.
	chownVolumeRoot(t, e.Image, sb.Volume, "65532")
	err := e.Adapter.ExchangeWorkspace(ctx, sb, ".rollback-9")
	if !spec.IsCode(err, spec.CodeConflict) || !strings.Contains(err.Error(), "owned by uid 65532") {
		t.Fatalf("exchange of a workspace the user owns: %v, want conflict naming the owner", err)
	}
	if out := e.Sh(t, sb, "cat /workspace/work/old.txt"); out != "old\n" {
		t.Fatalf("a refused exchange changed work: %q", out)
	}
	chownVolumeRoot(t, e.Image, sb.Volume, "0")

	if err := e.Adapter.ExchangeWorkspace(ctx, sb, ".rollback-9"); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.Adapter.MarkerProof(ctx, sb, "work", marker); err != nil || !ok {
		t.Fatalf("proof after the exchange: %v %v", ok, err)
	}
	if out := e.Sh(t, sb, "cat /workspace/work/new.txt /workspace/.rollback-9/old.txt; stat -c '%u %a' /workspace /workspace/.stockade"); out != "new\nold\n0 755\n0 755\n" {
		t.Fatalf("after the exchange: %q", out)
	}
	if err := e.Adapter.EmptyWorkspaceDir(ctx, sb, ".rollback-9", "work/"+marker); err != nil {
		t.Fatal(err)
	}
	if out := e.Sh(t, sb, "ls -A /workspace/work /workspace/.rollback-9"); strings.Contains(out, marker) || strings.Contains(out, "old.txt") {
		t.Fatalf("after the cleanup: %q", out)
	}
	list, err := e.Docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", dockerio.LabelRole+"="+string(dockerio.RoleExchange)), filters.Arg("label", dockerio.LabelOwner+"="+e.Owner))})
	if err != nil || len(list) != 0 {
		t.Fatalf("exchange containers left: %d %v", len(list), err)
	}
}

// newWardenDio is testkit.NewDio with an adapter that delivers the warden (built
// into the binary's helpers) into its sandboxes.
func newWardenDio(t *testing.T) *testkit.DioEnv {
	t.Helper()
	e := testkit.NewDio(t)
	bin, err := helpers.Resolve(helpers.Warden, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if e.Adapter, err = dockerio.NewAdapter(dockerio.Options{WardenBinary: bin}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Adapter.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Adapter.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// chownVolumeRoot gives a workspace volume's root to uid, from a
// throwaway container of the test's own (root, the default capabilities).
func chownVolumeRoot(t *testing.T, image, volume, uid string) {
	t.Helper()
	out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--user", "0:0", "-v", volume+":/workspace", "--entrypoint", "chown", image, uid+":"+uid, "/workspace").CombinedOutput()
	if err != nil {
		t.Fatalf("chown of the volume's root: %v %s", err, out)
	}
}

// TestDockerioPutRefusesPlantedLinks (found by the attacker's review of
// issue 30): links the workload planted in work, to /workspace, do not take
// a put's extraction (the daemon's, as root) out of work: a put whose
// destination or an implied parent is such a link is refused before
// anything is extracted, and root's directories stay root's; an archive
// that makes the directory over the link is refused by the daemon.
func TestDockerioPutRefusesPlantedLinks(t *testing.T) {
	e := newWardenDio(t)
	sb := e.Sandbox(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.Sh(t, sb, "cd /workspace/work && ln -s /workspace w && ln -s /workspace out && mkdir -p real && ln -s /workspace real/in && ln -s /workspace/.stockade planted")
	put := func(dir string, hs ...testkit.TarEntry) error {
		return e.Adapter.PutArchive(ctx, sb, dir, testkit.TarOf(t, hs...))
	}
	for _, tc := range []struct {
		name string
		dir  string
		hs   []testkit.TarEntry
	}{
		{"an implied parent", "work", []testkit.TarEntry{{Name: "w/.stockade/", Type: tar.TypeDir}}},
		{"a file under an implied parent", "work", []testkit.TarEntry{{Name: "w/hello", Type: tar.TypeReg, Body: "x"}}},
		{"the destination", "work/out", []testkit.TarEntry{{Name: "hello", Type: tar.TypeReg, Body: "x"}}},
		{"a deeper implied parent", "work", []testkit.TarEntry{{Name: "real/in/hello", Type: tar.TypeReg, Body: "x"}}},
		{"a hardlink's target", "work", []testkit.TarEntry{{Name: "h", Type: tar.TypeLink, Link: "w/.stockade/stockade-warden"}}},
		// The second review: through the archive's own relative link to a
		// planted one, and a hardlink naming a planted link (the daemon
		// chmods the new link, following it).
		{"the archive's own link to a planted one", "work", []testkit.TarEntry{{Name: "s", Type: tar.TypeSymlink, Link: "planted"}, {Name: "s/hello", Type: tar.TypeReg, Body: "x"}}},
		{"a hardlink to a planted link", "work", []testkit.TarEntry{{Name: "h1", Type: tar.TypeLink, Link: "planted"}}},
	} {
		if err := put(tc.dir, tc.hs...); !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), "link") {
			t.Errorf("%s: %v, want invalid_argument naming the link", tc.name, err)
		}
	}
	if out := e.Sh(t, sb, "stat -c '%u %a' /workspace /workspace/.stockade; ls /workspace /workspace/.stockade"); !strings.HasPrefix(out, "0 755\n0 755\n") || strings.Contains(out, "hello") {
		t.Fatalf("after the refused puts: %q", out)
	}
	// An archive that makes the directory itself over the link is refused
	// by the daemon (a non-directory is not overwritten with one).
	if err := put("work", testkit.TarEntry{Name: "w/", Type: tar.TypeDir}, testkit.TarEntry{Name: "w/hello", Type: tar.TypeReg, Body: "x"}); err == nil {
		t.Fatal("a put making a directory over a planted link: no error")
	}
	if out := e.Sh(t, sb, "stat -c '%u %a' /workspace /workspace/.stockade; ls /workspace"); !strings.HasPrefix(out, "0 755\n0 755\n") || strings.Contains(out, "hello") {
		t.Fatalf("after the put over the link: %q", out)
	}
}
