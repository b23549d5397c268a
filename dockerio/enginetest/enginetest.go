// Package enginetest is the conformance suite of dockerio.Engine: what
// every engine must do, checked against the real Adapter (with a Docker
// daemon, in test/dockerio/) and against the Fake (in dockerio's unit tests), so the
// Fake the actors' tests run on cannot drift from Docker.
//
// Run takes a function that makes a fresh Target for each subtest. The
// subtests go role by role (see dockerio.Engine): Checks, Sandboxes,
// Inventory, Execs, Files, Networks, Wardens and Events. Every resource a
// subtest makes carries the target's owner label; the maker removes them
// when the test ends, pass or fail.
//
// The Fake differs from Docker on purpose in a few places; the suite does
// not check those: it runs no program (Commands models the few the suite
// runs), has no warden and no egress proxy, and keeps no event history.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

// Target is one engine under test.
type Target struct {
	Engine dockerio.Engine
	// Owner is an owner id of this test alone; the maker removes every
	// resource labelled with it when the test ends.
	Owner string
	// Image is the ID of a sandbox image the engine has, with /bin/sh,
	// true, echo, cat and sleep.
	Image string
}

// callTimeout bounds one engine call: a hung daemon fails the test instead
// of hanging it. It is a bound, never an assertion.
const callTimeout = 2 * time.Minute

// Run runs every subtest against engines made by mk.
func Run(t *testing.T, mk func(t *testing.T) Target) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, e env)
	}{
		{"Checks", testChecks},
		{"Sandboxes", testSandboxes},
		{"StopAndRemove", testStopAndRemove},
		{"Pause", testPause},
		{"Inventory", testInventory},
		{"Execs", testExecs},
		{"Signals", testSignals},
		{"Files", testFiles},
		{"Networks", testNetworks},
		{"Wardens", testWardens},
		{"Events", testEvents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := mk(t)
			tc.fn(t, env{Target: tg, e: tg.Engine})
		})
	}
}

// env is a subtest's target and helpers.
type env struct {
	Target
	e dockerio.Engine
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

var seq atomic.Int64

// newID is an id unique in this process and across runs of it.
func newID(prefix string) string {
	return fmt.Sprintf("%s%d_%d", prefix, time.Now().UnixNano()%1e9, seq.Add(1))
}

func (v env) spec(network spec.NetworkKind) spec.Sandbox {
	s := spec.Sandbox{Image: v.Image, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}
	s.Policy.MemoryBytes = 128 << 20
	s.Policy.TmpBytes = 16 << 20
	s.Policy.HomeBytes = 8 << 20
	s.Policy.Pids = 64
	s.Policy.Network = network
	return s
}

// create makes a sandbox (not started).
func (v env) create(t *testing.T, network spec.NetworkKind) dockerio.Sandbox {
	t.Helper()
	sb, err := v.e.CreateSandbox(ctxT(t), dockerio.SandboxRequest{Owner: v.Owner, ID: newID("s"), Spec: v.spec(network)})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	return sb
}

// started makes and starts an isolated sandbox.
func (v env) started(t *testing.T) dockerio.Sandbox {
	t.Helper()
	sb := v.create(t, spec.NetworkIsolated)
	if err := v.e.StartSandbox(ctxT(t), sb); err != nil {
		t.Fatalf("StartSandbox: %v", err)
	}
	return sb
}

func wantCode(t *testing.T, what string, err error, code spec.Code) {
	t.Helper()
	if !spec.IsCode(err, code) {
		t.Errorf("%s: %v, want code %s", what, err, code)
	}
}

func testChecks(t *testing.T, v env) {
	ctx := ctxT(t)
	d, err := v.e.Preflight(ctx)
	if err != nil {
		t.Fatalf("Preflight: %v", err)
	}
	if d.ID == "" || d.Profile == "" || d.Revision == "" || d.APIVersion == "" {
		t.Errorf("Preflight: %+v, want id, profile, revision and API version", d)
	}
	if id, err := v.e.ResolveImage(ctx, v.Image); err != nil || id != v.Image {
		t.Errorf("ResolveImage(%s) = %q, %v; want the same id", v.Image, id, err)
	}
	_, err = v.e.ResolveImage(ctx, "stockade/no-such-image:never")
	wantCode(t, "ResolveImage of a missing image", err, spec.CodeNotFound)
	_, err = v.e.ResolveImage(ctx, "")
	wantCode(t, "ResolveImage of an empty reference", err, spec.CodeInvalidArgument)
	// Outside Docker's grammar (an upper-case name): the caller's error,
	// before the engine is asked.
	_, err = v.e.ResolveImage(ctx, "Stockade/Toolbox:dev")
	wantCode(t, "ResolveImage of an upper-case reference", err, spec.CodeInvalidArgument)
}

// wantResources checks what a sandbox lists: exactly the roles given, each
// with its name and every label of ours.
func wantResources(t *testing.T, what string, sb dockerio.Sandbox, rs []dockerio.Resource, roles ...dockerio.Role) {
	t.Helper()
	kinds := map[dockerio.Role]dockerio.Kind{dockerio.RoleWorkload: dockerio.KindContainer, dockerio.RoleExport: dockerio.KindContainer,
		dockerio.RoleVolume: dockerio.KindVolume, dockerio.RoleNetwork: dockerio.KindNetwork}
	ids := map[dockerio.Role]string{dockerio.RoleWorkload: sb.Workload, dockerio.RoleExport: sb.Export, dockerio.RoleVolume: sb.Volume, dockerio.RoleNetwork: sb.Network}
	got := map[dockerio.Role]dockerio.Resource{}
	for _, r := range rs {
		if _, dup := got[r.Role]; dup {
			t.Errorf("%s: role %s listed twice: %+v", what, r.Role, rs)
		}
		got[r.Role] = r
	}
	if len(got) != len(roles) {
		t.Errorf("%s: %d resources %+v, want roles %v", what, len(rs), rs, roles)
	}
	for _, role := range roles {
		r, ok := got[role]
		if !ok {
			t.Errorf("%s: no %s resource in %+v", what, role, rs)
			continue
		}
		if r.Kind != kinds[role] || r.ID != ids[role] || r.Name != dockerio.Name(sb.Owner, sb.ID, role) ||
			r.Owner != sb.Owner || r.Sandbox != sb.ID || r.Revision != sb.Revision {
			t.Errorf("%s: %s is %+v; want kind %s, id %s, name %s, owner %s, sandbox %s, revision %s", what, role, r,
				kinds[role], ids[role], dockerio.Name(sb.Owner, sb.ID, role), sb.Owner, sb.ID, sb.Revision)
		}
		for k, want := range dockerio.Labels(sb.Owner, sb.ID, role, sb.Revision) {
			if r.Labels[k] != want {
				t.Errorf("%s: %s label %s = %q, want %q", what, role, k, r.Labels[k], want)
			}
		}
	}
}

// owned returns what ListOwned lists for one sandbox (nil when nothing).
func (v env) owned(t *testing.T, sandbox string) []dockerio.Resource {
	t.Helper()
	list, err := v.e.ListOwned(ctxT(t), v.Owner)
	if err != nil {
		t.Fatalf("ListOwned: %v", err)
	}
	for _, o := range list {
		if o.Sandbox == sandbox {
			return o.Resources
		}
	}
	return nil
}

func testSandboxes(t *testing.T, v env) {
	ctx := ctxT(t)
	d, err := v.e.Preflight(ctx)
	if err != nil {
		t.Fatalf("Preflight: %v", err)
	}
	req := dockerio.SandboxRequest{Owner: v.Owner, ID: newID("s"), Spec: v.spec(spec.NetworkIsolated)}
	sb, err := v.e.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if sb.Owner != req.Owner || sb.ID != req.ID || sb.Revision != d.Revision || sb.Workload == "" || sb.Export == "" ||
		sb.Volume != dockerio.Name(req.Owner, req.ID, dockerio.RoleVolume) || sb.Network != "" || sb.Egress != "" {
		t.Errorf("CreateSandbox: %+v; want owner, id, revision %s, both containers, the volume by name, no network", sb, d.Revision)
	}
	wantResources(t, "created", sb, v.owned(t, sb.ID), dockerio.RoleWorkload, dockerio.RoleExport, dockerio.RoleVolume)

	// Idempotent under the names: a retried create adopts what it finds.
	again, err := v.e.CreateSandbox(ctx, req)
	if err != nil || again.Workload != sb.Workload || again.Export != sb.Export || again.Volume != sb.Volume {
		t.Errorf("CreateSandbox again: %+v, %v; want the same resources as %+v", again, err, sb)
	}

	// An engine may have begun the workload's start in the create (see
	// dockerio.Sandboxes): whether it runs yet is not checked here (the
	// Fake's own tests check its created state).
	obs, err := v.e.InspectSandbox(ctx, sb)
	if err != nil || obs.Mismatch != "" || len(obs.Present) != 3 {
		t.Errorf("InspectSandbox, created: %+v, %v; want its three resources", obs, err)
	}

	if err := v.e.StartSandbox(ctx, sb); err != nil {
		t.Fatalf("StartSandbox: %v", err)
	}
	if err := v.e.VerifySandbox(ctx, sb); err != nil {
		t.Errorf("VerifySandbox, started: %v", err)
	}
	obs, err = v.e.InspectSandbox(ctx, sb)
	if err != nil || !obs.Running || obs.Paused || obs.Exit != nil || obs.Mismatch != "" || obs.Revision != sb.Revision {
		t.Errorf("InspectSandbox, started: %+v, %v; want running, revision %s, no mismatch", obs, err, sb.Revision)
	}
	wantResources(t, "inspected", sb, obs.Present, dockerio.RoleWorkload, dockerio.RoleExport, dockerio.RoleVolume)

	// Bad ids are refused before anything is made.
	for _, bad := range []dockerio.SandboxRequest{
		{Owner: "bad owner", ID: newID("s"), Spec: req.Spec},
		{Owner: v.Owner, ID: "../s", Spec: req.Spec},
	} {
		_, err := v.e.CreateSandbox(ctx, bad)
		wantCode(t, fmt.Sprintf("CreateSandbox(%q, %q)", bad.Owner, bad.ID), err, spec.CodeInvalidArgument)
	}
	wantCode(t, "RemoveSandbox with a bad owner", v.e.RemoveSandbox(ctx, dockerio.Sandbox{Owner: "bad owner", ID: "s"}), spec.CodeInvalidArgument)
}

func testStopAndRemove(t *testing.T, v env) {
	ctx := ctxT(t)
	sb := v.started(t)
	// Running, its cgroup reads: tasks, memory, a CPU time that never
	// goes back.
	first, err := v.e.SampleUsage(ctx, sb)
	if err != nil || first.At.IsZero() || first.Pids < 1 || first.Memory <= 0 || first.CPU < 0 {
		t.Errorf("SampleUsage, running: %+v, %v; want a task, memory, a time", first, err)
	}
	if again, err := v.e.SampleUsage(ctx, sb); err != nil || again.CPU < first.CPU || again.At.Before(first.At) {
		t.Errorf("SampleUsage again: %+v, %v; want counters not below %+v", again, err, first)
	}
	// Stopped: every resource stays, the workload's exit is its init's
	// TERM (it passes the signal on to the workload's command).
	exit, err := v.e.StopSandbox(ctx, sb, 30*time.Second)
	if err != nil || exit.ExitCode != 128+int(syscall.SIGTERM) || exit.OOMKilled {
		t.Errorf("StopSandbox: %+v, %v; want exit %d", exit, err, 128+int(syscall.SIGTERM))
	}
	obs, err := v.e.InspectSandbox(ctx, sb)
	if err != nil || obs.Running || obs.Exit == nil || obs.Exit.ExitCode != exit.ExitCode {
		t.Errorf("InspectSandbox, stopped: %+v, %v; want not running, exit %d", obs, err, exit.ExitCode)
	}
	wantResources(t, "stopped", sb, obs.Present, dockerio.RoleWorkload, dockerio.RoleExport, dockerio.RoleVolume)
	wantCode(t, "VerifySandbox, stopped", v.e.VerifySandbox(ctx, sb), spec.CodeUnsupported)
	_, err = v.e.CreateExec(ctx, sb, dockerio.ExecRequest{ProcessID: newID("p"), Spec: proc(false, "true")})
	wantCode(t, "CreateExec, stopped", err, spec.CodeConflict)
	_, err = v.e.SampleUsage(ctx, sb)
	wantCode(t, "SampleUsage, stopped", err, spec.CodeNotFound)
	if again, err := v.e.StopSandbox(ctx, sb, time.Second); err != nil || again != exit {
		t.Errorf("StopSandbox again: %+v, %v; want %+v", again, err, exit)
	}

	// Removed: nothing is left, and every call on it says not_found, but
	// those that make it so (stop, remove, unpause).
	if err := v.e.RemoveSandbox(ctx, sb); err != nil {
		t.Fatalf("RemoveSandbox: %v", err)
	}
	if rs := v.owned(t, sb.ID); len(rs) != 0 {
		t.Errorf("ListOwned after remove: %+v", rs)
	}
	obs, err = v.e.InspectSandbox(ctx, sb)
	if err != nil || len(obs.Present) != 0 || obs.Running || obs.Exit != nil {
		t.Errorf("InspectSandbox, removed: %+v, %v; want nothing", obs, err)
	}
	if err := v.e.RemoveSandbox(ctx, sb); err != nil {
		t.Errorf("RemoveSandbox again: %v", err)
	}
	if exit, err := v.e.StopSandbox(ctx, sb, time.Second); err != nil || exit.ExitCode != -1 {
		t.Errorf("StopSandbox, removed: %+v, %v; want exit -1", exit, err)
	}
	if err := v.e.UnpauseSandbox(ctx, sb); err != nil {
		t.Errorf("UnpauseSandbox, removed: %v", err)
	}
	notFound := map[string]error{
		"StartSandbox":  v.e.StartSandbox(ctx, sb),
		"VerifySandbox": v.e.VerifySandbox(ctx, sb),
		"PauseSandbox":  v.e.PauseSandbox(ctx, sb),
		"SignalGroup":   v.e.SignalGroup(ctx, sb, 1234, 0),
		"PutArchive":    v.e.PutArchive(ctx, sb, "work", tarOf(t)),
	}
	_, notFound["CreateExec"] = v.e.CreateExec(ctx, sb, dockerio.ExecRequest{ProcessID: newID("p"), Spec: proc(false, "true")})
	_, notFound["ReadGroup"] = v.e.ReadGroup(ctx, sb, newID("p"))
	_, notFound["OOMKills"] = v.e.OOMKills(ctx, sb)
	if rc, err := v.e.GetArchive(ctx, sb, "work"); err == nil {
		_ = rc.Close() // only read; the missing not_found is the failure
	} else {
		notFound["GetArchive"] = err
	}
	for op, err := range notFound {
		wantCode(t, op+", removed", err, spec.CodeNotFound)
	}
}

func testPause(t *testing.T, v env) {
	ctx := ctxT(t)
	sb := v.started(t)
	if err := v.e.PauseSandbox(ctx, sb); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	if obs, err := v.e.InspectSandbox(ctx, sb); err != nil || !obs.Running || !obs.Paused {
		t.Errorf("InspectSandbox, paused: %+v, %v; want running and paused", obs, err)
	}
	_, err := v.e.CreateExec(ctx, sb, dockerio.ExecRequest{ProcessID: newID("p"), Spec: proc(false, "true")})
	wantCode(t, "CreateExec, paused", err, spec.CodeConflict)
	if !errors.Is(err, dockerio.ErrPaused) {
		t.Errorf("CreateExec, paused: %v, want ErrPaused", err)
	}
	wantCode(t, "PauseSandbox again", v.e.PauseSandbox(ctx, sb), spec.CodeConflict)
	for i := range 2 { // the second: one not paused is no error
		if err := v.e.UnpauseSandbox(ctx, sb); err != nil {
			t.Errorf("UnpauseSandbox #%d: %v", i+1, err)
		}
	}
	if obs, err := v.e.InspectSandbox(ctx, sb); err != nil || !obs.Running || obs.Paused {
		t.Errorf("InspectSandbox, thawed: %+v, %v; want running, not paused", obs, err)
	}
	// A paused workload is thawed to be stopped.
	if err := v.e.PauseSandbox(ctx, sb); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	if exit, err := v.e.StopSandbox(ctx, sb, 30*time.Second); err != nil || exit.ExitCode == -1 {
		t.Errorf("StopSandbox, paused: %+v, %v", exit, err)
	}
	if obs, err := v.e.InspectSandbox(ctx, sb); err != nil || obs.Running || obs.Paused {
		t.Errorf("InspectSandbox, stopped while paused: %+v, %v; want neither running nor paused", obs, err)
	}
}

func testInventory(t *testing.T, v env) {
	ctx := ctxT(t)
	a, b := v.create(t, spec.NetworkIsolated), v.create(t, spec.NetworkIsolated)
	list, err := v.e.ListOwned(ctx, v.Owner)
	if err != nil {
		t.Fatalf("ListOwned: %v", err)
	}
	bySandbox := map[string][]dockerio.Resource{}
	for _, o := range list {
		bySandbox[o.Sandbox] = o.Resources
	}
	if len(bySandbox) != 2 {
		t.Errorf("ListOwned: %+v, want sandboxes %s and %s only", list, a.ID, b.ID)
	}
	for _, sb := range []dockerio.Sandbox{a, b} {
		wantResources(t, "ListOwned "+sb.ID, sb, bySandbox[sb.ID], dockerio.RoleWorkload, dockerio.RoleExport, dockerio.RoleVolume)
	}
	if other, err := v.e.ListOwned(ctx, newID("other")); err != nil || len(other) != 0 {
		t.Errorf("ListOwned of another owner: %+v, %v; want nothing", other, err)
	}
	_, err = v.e.ListOwned(ctx, "bad owner")
	wantCode(t, "ListOwned of a bad owner", err, spec.CodeInvalidArgument)

	// RemoveOwned takes one resource; it refuses one whose owner label is
	// not the one given, and one given without an owner.
	var workload dockerio.Resource
	for _, r := range bySandbox[a.ID] {
		if r.Role == dockerio.RoleWorkload {
			workload = r
		}
	}
	wrong := workload
	wrong.Owner = newID("other")
	wantCode(t, "RemoveOwned, another owner", v.e.RemoveOwned(ctx, wrong), spec.CodeConflict)
	wrong.Owner = ""
	wantCode(t, "RemoveOwned, no owner", v.e.RemoveOwned(ctx, wrong), spec.CodeInvalidArgument)
	if err := v.e.RemoveOwned(ctx, workload); err != nil {
		t.Fatalf("RemoveOwned(%+v): %v", workload, err)
	}
	if err := v.e.RemoveOwned(ctx, workload); err != nil {
		t.Errorf("RemoveOwned again: %v", err)
	}
	obs, err := v.e.InspectSandbox(ctx, a)
	if err != nil || obs.Running || obs.Exit != nil {
		t.Errorf("InspectSandbox without its workload: %+v, %v; want neither running nor exited", obs, err)
	}
	wantResources(t, "without its workload", a, obs.Present, dockerio.RoleExport, dockerio.RoleVolume)
	wantResources(t, "the other sandbox", b, v.owned(t, b.ID), dockerio.RoleWorkload, dockerio.RoleExport, dockerio.RoleVolume)
	// Orphans removed one by one leave nothing.
	for _, r := range bySandbox[a.ID] {
		if err := v.e.RemoveOwned(ctx, r); err != nil {
			t.Errorf("RemoveOwned(%s %s): %v", r.Kind, r.Role, err)
		}
	}
	if rs := v.owned(t, a.ID); len(rs) != 0 {
		t.Errorf("ListOwned after removing each: %+v", rs)
	}
}

func proc(stdin bool, argv ...string) spec.Process {
	return spec.Process{Argv: argv, Stdin: stdin, Stdout: spec.Pipe, Stderr: spec.Pipe}
}

// ran is one finished exec.
type ran struct {
	id, processID  string
	code           int
	stdout, stderr string
	group          int
	oom            int64
}

// start creates and attaches an exec.
func (v env) start(t *testing.T, sb dockerio.Sandbox, stdin bool, argv ...string) (dockerio.ExecRequest, string, dockerio.Attachment) {
	t.Helper()
	ctx := ctxT(t)
	req := dockerio.ExecRequest{ProcessID: newID("p"), Spec: proc(stdin, argv...)}
	id, err := v.e.CreateExec(ctx, sb, req)
	if err != nil {
		t.Fatalf("CreateExec %q: %v", argv, err)
	}
	if st, err := v.e.InspectExec(ctx, id); err != nil || !st.Known || st.Running || st.Pid != 0 {
		t.Errorf("InspectExec, created: %+v, %v; want known, not running, no pid", st, err)
	}
	att, err := v.e.AttachExec(ctx, sb, id, req)
	if err != nil {
		t.Fatalf("AttachExec %q: %v", argv, err)
	}
	t.Cleanup(func() { _ = att.Close() }) // teardown
	return req, id, att
}

// finish reads an attachment to its end and waits for the exec's exit.
func (v env) finish(t *testing.T, req dockerio.ExecRequest, id string, att dockerio.Attachment) ran {
	t.Helper()
	r := ran{id: id, processID: req.ProcessID, group: att.Group(), oom: att.OOMKills()}
	var out, errb bytes.Buffer
	for {
		sid, p, err := att.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("exec %q: reading: %v", req.Spec.Argv, err)
		}
		if sid == framing.Stdout {
			out.Write(p)
		} else {
			errb.Write(p)
		}
	}
	st, err := dockerio.WaitExec(ctxT(t), v.e, id)
	if err != nil || !st.Known || st.Running || st.Pid == 0 {
		t.Fatalf("exec %q: WaitExec: %+v, %v; want known, ended, with the pid it had", req.Spec.Argv, st, err)
	}
	r.code, r.stdout, r.stderr = st.ExitCode, out.String(), errb.String()
	return r
}

// run runs argv to its end, with stdin if not nil.
func (v env) run(t *testing.T, sb dockerio.Sandbox, stdin []byte, argv ...string) ran {
	t.Helper()
	req, id, att := v.start(t, sb, stdin != nil, argv...)
	if stdin != nil {
		if _, err := att.Stdin().Write(stdin); err != nil {
			t.Fatalf("exec %q: stdin: %v", argv, err)
		}
		if err := att.CloseStdin(); err != nil {
			t.Fatalf("exec %q: closing stdin: %v", argv, err)
		}
	}
	return v.finish(t, req, id, att)
}

func testExecs(t *testing.T, v env) {
	ctx := ctxT(t)
	sb := v.started(t)
	for _, tc := range []struct {
		argv   []string
		stdin  []byte
		code   int
		stdout string
	}{
		{[]string{"true"}, nil, 0, ""},
		{[]string{"/bin/sh", "-c", "exit 3"}, nil, 3, ""},
		{[]string{"/bin/sh", "-c", "exit 255"}, nil, 255, ""},
		{[]string{"echo", "hello", "world"}, nil, 0, "hello world\n"},
		{[]string{"cat"}, []byte("from stdin\n"), 0, "from stdin\n"},
	} {
		r := v.run(t, sb, tc.stdin, tc.argv...)
		if r.code != tc.code || r.stdout != tc.stdout {
			t.Errorf("%q: exit %d, stdout %q; want exit %d, stdout %q (stderr %q)", tc.argv, r.code, r.stdout, tc.code, tc.stdout, r.stderr)
		}
		if r.group <= 1 {
			t.Errorf("%q: group %d, want one above 1", tc.argv, r.group)
		}
		if g, err := v.e.ReadGroup(ctx, sb, r.processID); err != nil || g != r.group {
			t.Errorf("%q: ReadGroup = %d, %v; want %d", tc.argv, g, err, r.group)
		}
	}
	// A missing binary: the exec cannot start it. Docker says so with exit
	// 127 and text that ExecFailure types (or AttachExec does, when Docker
	// fails before the command's turn).
	req := dockerio.ExecRequest{ProcessID: newID("p"), Spec: proc(false, "no-such-command")}
	id, err := v.e.CreateExec(ctx, sb, req)
	if err != nil {
		t.Fatalf("CreateExec of a missing binary: %v", err)
	}
	if att, err := v.e.AttachExec(ctx, sb, id, req); err != nil {
		wantCode(t, "AttachExec of a missing binary", err, spec.CodeExecFailed)
	} else {
		t.Cleanup(func() { _ = att.Close() }) // teardown
		r := v.finish(t, req, id, att)
		if err := dockerio.ExecFailure(r.code, []byte(r.stderr)); !spec.IsCode(err, spec.CodeExecFailed) {
			t.Errorf("missing binary: exit %d, stderr %q: ExecFailure %v, want exec_failed", r.code, r.stderr, err)
		}
	}

	// A working directory that does not exist: Docker cannot start the
	// exec at all.
	req = dockerio.ExecRequest{ProcessID: newID("p"), Spec: proc(false, "true")}
	req.Spec.Dir = dockerio.WorkDir + "/no-such-dir"
	if id, err = v.e.CreateExec(ctx, sb, req); err != nil {
		t.Fatalf("CreateExec in a missing directory: %v", err)
	}
	if att, err := v.e.AttachExec(ctx, sb, id, req); err == nil {
		_ = att.Close() // teardown; the missing error is the failure
		t.Errorf("AttachExec in a missing directory: no error, want exec_failed")
	} else {
		wantCode(t, "AttachExec in a missing directory", err, spec.CodeExecFailed)
	}

	if st, err := v.e.InspectExec(ctx, strings.Repeat("0", 64)); err != nil || st.Known {
		t.Errorf("InspectExec of an unknown exec: %+v, %v; want unknown, no error", st, err)
	}
	_, err = v.e.AttachExec(ctx, sb, strings.Repeat("0", 64), req)
	wantCode(t, "AttachExec of an unknown exec", err, spec.CodeNotFound)
	_, err = v.e.ReadGroup(ctx, sb, newID("p"))
	wantCode(t, "ReadGroup of a process never run", err, spec.CodeNotFound)
	_, err = v.e.ReadGroup(ctx, sb, "bad id")
	wantCode(t, "ReadGroup of a bad id", err, spec.CodeInvalidArgument)
	tty := proc(false, "true")
	tty.TTY = true
	_, err = v.e.CreateExec(ctx, sb, dockerio.ExecRequest{ProcessID: newID("p"), Spec: tty})
	wantCode(t, "CreateExec with a terminal", err, spec.CodeUnsupported)
	_, err = v.e.CreateExec(ctx, sb, dockerio.ExecRequest{ProcessID: "bad id", Spec: proc(false, "true")})
	wantCode(t, "CreateExec with a bad process id", err, spec.CodeInvalidArgument)

	// The OOM kill count a process starts with is the sandbox's now
	// (nothing was killed meanwhile).
	r := v.run(t, sb, nil, "true")
	_, err = v.e.AttachExec(ctx, sb, r.id, dockerio.ExecRequest{ProcessID: r.processID, Spec: proc(false, "true")})
	wantCode(t, "AttachExec of an exec that ended", err, spec.CodeConflict)
	if n, err := v.e.OOMKills(ctx, sb); err != nil || n < -1 || n != r.oom {
		t.Errorf("OOMKills = %d, %v; want %d, as at the last process's start", n, err, r.oom)
	}
}

func testSignals(t *testing.T, v env) {
	ctx := ctxT(t)
	sb := v.started(t)
	req, id, att := v.start(t, sb, false, "sleep", "1000")
	g := att.Group()
	_, err := v.e.AttachExec(ctx, sb, id, req)
	wantCode(t, "AttachExec of an exec already started", err, spec.CodeConflict)
	if st, err := v.e.InspectExec(ctx, id); err != nil || !st.Known || !st.Running {
		t.Errorf("InspectExec, running: %+v, %v; want known and running", st, err)
	}
	if err := v.e.SignalGroup(ctx, sb, g, 0); err != nil {
		t.Errorf("SignalGroup(%d, 0), running: %v", g, err)
	}
	if err := v.e.SignalGroup(ctx, sb, g, syscall.SIGKILL); err != nil {
		t.Fatalf("SignalGroup(%d, KILL): %v", g, err)
	}
	if r := v.finish(t, req, id, att); r.code != 128+int(syscall.SIGKILL) {
		t.Errorf("killed: exit %d, want %d", r.code, 128+int(syscall.SIGKILL))
	}
	wantCode(t, "SignalGroup of a group gone", v.e.SignalGroup(ctx, sb, g, 0), spec.CodeNotFound)
	wantCode(t, "SignalGroup(1)", v.e.SignalGroup(ctx, sb, 1, syscall.SIGKILL), spec.CodeInvalidArgument)
	wantCode(t, "SignalGroup with signal 99", v.e.SignalGroup(ctx, sb, g, 99), spec.CodeInvalidArgument)

	// A stop ends the processes in it.
	req, id, att = v.start(t, sb, false, "sleep", "1000")
	if _, err := v.e.StopSandbox(ctx, sb, 30*time.Second); err != nil {
		t.Fatalf("StopSandbox: %v", err)
	}
	if r := v.finish(t, req, id, att); r.code != 128+int(syscall.SIGKILL) && r.code != 128+int(syscall.SIGTERM) {
		t.Errorf("stopped under it: exit %d, want one of a signal's", r.code)
	}
}

func testNetworks(t *testing.T, v env) {
	ctx := ctxT(t)
	req := dockerio.SandboxRequest{Owner: v.Owner, ID: newID("s"), Spec: v.spec(spec.NetworkOpen)}
	sb, err := v.e.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("CreateSandbox, open: %v", err)
	}
	if sb.Network == "" || sb.Egress != "" || sb.Outside != "" {
		t.Errorf("CreateSandbox, open: %+v; want its own network and no egress role", sb)
	}
	wantResources(t, "open", sb, v.owned(t, sb.ID), dockerio.RoleWorkload, dockerio.RoleExport, dockerio.RoleVolume, dockerio.RoleNetwork)
	// Ensured, not made twice: a retried create adopts the network.
	again, err := v.e.CreateSandbox(ctx, req)
	if err != nil || again.Network != sb.Network {
		t.Errorf("CreateSandbox again: network %q, %v; want %q", again.Network, err, sb.Network)
	}
	if err := v.e.StartSandbox(ctx, sb); err != nil {
		t.Fatalf("StartSandbox, open: %v", err)
	}
	if obs, err := v.e.InspectSandbox(ctx, sb); err != nil || !obs.Running || obs.Mismatch != "" {
		t.Errorf("InspectSandbox, open: %+v, %v", obs, err)
	}
	_, err = v.e.OpenEgress(ctx, sb, io.Discard)
	wantCode(t, "OpenEgress of a sandbox with no egress", err, spec.CodeConflict)
	if err := v.e.RemoveSandbox(ctx, sb); err != nil {
		t.Fatalf("RemoveSandbox, open: %v", err)
	}
	if rs := v.owned(t, sb.ID); len(rs) != 0 {
		t.Errorf("ListOwned after removing an open sandbox: %+v", rs)
	}
}

// next waits for the first event that match accepts.
func next(t *testing.T, evs <-chan dockerio.ContainerEvent, errs <-chan error, what string, match func(dockerio.ContainerEvent) bool) dockerio.ContainerEvent {
	t.Helper()
	ctx := ctxT(t)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("%s: the event stream ended", what)
			}
			if match(ev) {
				return ev
			}
		case err := <-errs:
			t.Fatalf("%s: the event stream broke: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("%s: no event in %s", what, callTimeout)
		}
	}
}

func testEvents(t *testing.T, v env) {
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	sb := v.started(t)
	// From a moment ago: the daemon replays what came after it, so an
	// event between the call and the subscription taking hold is not lost.
	evs, errs := v.e.Events(ctx, v.Owner, time.Now().Add(-time.Second))

	r := v.run(t, sb, nil, "/bin/sh", "-c", "exit 5")
	ev := next(t, evs, errs, "exec_die", func(ev dockerio.ContainerEvent) bool { return ev.Action == dockerio.ActionExecDie && ev.ExecID == r.id })
	if ev.Sandbox != sb.ID || ev.Container != sb.Workload || ev.Role != dockerio.RoleWorkload || ev.ExitCode != 5 || ev.Time.IsZero() {
		t.Errorf("exec_die: %+v; want sandbox %s, container %s, role workload, exit 5, a time", ev, sb.ID, sb.Workload)
	}

	exit, err := v.e.StopSandbox(ctx, sb, 30*time.Second)
	if err != nil {
		t.Fatalf("StopSandbox: %v", err)
	}
	ev = next(t, evs, errs, "die", func(ev dockerio.ContainerEvent) bool {
		return ev.Action == dockerio.ActionDie && ev.Container == sb.Workload
	})
	if ev.Sandbox != sb.ID || ev.Role != dockerio.RoleWorkload || ev.ExitCode != exit.ExitCode || ev.ExecID != "" {
		t.Errorf("die: %+v; want sandbox %s, role workload, exit %d", ev, sb.ID, exit.ExitCode)
	}

	// The stream ends with its context.
	cancel()
	for range evs {
	}
}
