package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stockade/stockade/profile"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

// Fake is an in-memory Engine for unit tests of the actors. It keeps
// sandboxes, execs and workspace files in maps, honours ctx on every call,
// produces exec output as real multiplexed frames (framing.Encoder) read
// through a framing.Decoder over a synchronous pipe (so an unread stream
// blocks the "process" as it would for real), and injects faults through
// Fault. It passes dockerio/enginetest, the suite the Adapter passes
// against Docker, with these differences, each deliberate: it runs no
// program (Script says what an exec, or a warden's child, does), runs the
// real warden library in-process (fake_warden.go; NoWarden leaves it out
// and every process is an exec), has no egress proxy (unsupported), knows every image ID (ResolveImage of an ID is that
// ID), the tags SetTag names and every directory outside the workspace (an
// exec's working directory), and keeps no event history (Events ignores
// since). Its
// sandboxes' resources are the workload and export containers, the volume
// and the sandbox's network; an allowlist sandbox's egress container and
// the owner's outside network are not listed.
type Fake struct {
	// DaemonID and Profile are what Preflight reports.
	DaemonID string
	Profile  profile.Profile
	// Script decides what an exec does; nil runs every exec as exit 0 with
	// no output.
	Script func(sb Sandbox, req ExecRequest) FakeRun
	// NoWarden makes the Fake deliver no warden: the runtime runs every
	// process as an exec (the exec transport's own tests).
	NoWarden bool
	// Fault, if set, is asked before every operation (named as the Engine
	// method, e.g. "CreateSandbox", "AttachExec"); a non-nil result is
	// returned instead of performing it.
	Fault func(op string) error

	mu sync.Mutex
	// tags maps image tags to IDs (SetTag); any other reference that is
	// not an ID is not found.
	tags      map[string]string
	next      int
	sandboxes map[string]*fakeSandbox // by owner/id
	execs     map[string]*fakeExec
	subs      map[string][]chan ContainerEvent // Events subscribers by owner
}

// FakeRun scripts one exec.
type FakeRun struct {
	// Frames are written in order as the process's output.
	Frames []FakeFrame
	// EchoStdin copies stdin to stdout (after Frames) until it is closed.
	EchoStdin bool
	// Hold, if not nil, keeps the process running (after its output) until
	// it is closed or the group is signalled.
	Hold chan struct{}
	// After are written once Hold is closed (not when the group is
	// signalled): output that comes later, after a consumer may have gone.
	After []FakeFrame
	// ExitCode is the process's exit code.
	ExitCode int
	// StartFailure makes AttachExec fail with exec_failed (as Docker's
	// exit 126/127 with text).
	StartFailure string
	// OOM makes the process end as the OOM killer ends one (after its
	// output): SIGKILL (137), and the sandbox's OOM kill count goes up.
	OOM bool
	// AttachLost makes AttachExec start the process and then fail, as an
	// attach whose connection is cut after the daemon started the exec:
	// the process runs on with nobody reading its output.
	AttachLost bool
	// IgnoreTERM makes the process live on after a SIGTERM (a process that
	// traps it), on a warden; a KILL still ends it.
	IgnoreTERM bool
	// Phantom126 makes a lost or closed attach behave as Docker 20.10's
	// cleanup of one: from then on the exec inspects as ended with 126
	// while the process runs on, and its real end's exec_die says 127.
	Phantom126 bool
}

// FakeFrame is one frame of scripted output.
type FakeFrame struct {
	Stream framing.StreamID
	Data   []byte
}

var _ Engine = (*Fake)(nil)

type fakeSandbox struct {
	sb       Sandbox
	oomKills int64
	running  bool
	paused   bool
	exit     *ContainerExit
	files    map[string]fakeFile // by path under /workspace; dirs end in '/'
	// removed holds the ids of the resources RemoveOwned took one by one;
	// the sandbox goes when all have.
	removed map[string]bool
	// wardens are the warden servers running in the workload.
	wardens []*fakeWarden
	// use is the workload's cgroup since its last start (fake_usage.go).
	use CgroupSample
}

// hasDir reports whether an exec's working directory exists: one in the
// workspace must have been made there; the Fake takes any other for the
// image's own. f.mu is held.
func (s *fakeSandbox) hasDir(dir string) bool {
	if dir == "" || dir == WorkspaceDir {
		return true
	}
	rel, ok := strings.CutPrefix(dir, WorkspaceDir+"/")
	if !ok {
		return true
	}
	_, ok = s.files[path.Clean(rel)+"/"]
	return ok
}

// fakeFile is one workspace entry: its bytes and permission bits.
type fakeFile struct {
	data []byte
	mode int64
	// root: owned by root (a rollback's marker); every other entry is the
	// sandbox user's.
	root bool
}

// NewFake returns a Fake reporting the given profile.
func NewFake(p profile.Profile) *Fake {
	return &Fake{DaemonID: "fake-daemon", Profile: p, sandboxes: map[string]*fakeSandbox{}, execs: map[string]*fakeExec{}}
}

func (f *Fake) enter(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return translate(err, "dockerio.fake", "%s", op)
	}
	if f.Fault != nil {
		if err := f.Fault(op); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fake) id(prefix string) string {
	f.next++
	return fmt.Sprintf("%s%060d", prefix, f.next)
}

func (f *Fake) Preflight(ctx context.Context) (Daemon, error) {
	if err := f.enter(ctx, "Preflight"); err != nil {
		return Daemon{}, err
	}
	return Daemon{ID: f.DaemonID, Version: "fake", APIVersion: f.Profile.APIVersion, Profile: f.Profile.Name, Revision: f.Profile.Revision()}, nil
}

func (f *Fake) ResolveImage(ctx context.Context, ref string) (string, error) {
	if err := f.enter(ctx, "ResolveImage"); err != nil {
		return "", err
	}
	if err := checkImageRef(ref); err != nil {
		return "", err
	}
	if spec.IsImageID(ref) {
		return ref, nil
	}
	f.mu.Lock()
	id, ok := f.tags[ref]
	f.mu.Unlock()
	if !ok {
		return "", spec.Errorf(spec.CodeNotFound, "dockerio.fake", "image %s", ref)
	}
	return id, nil
}

// SetTag points the tag ref at image id (an ID), as `docker tag` does.
func (f *Fake) SetTag(ref, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tags == nil {
		f.tags = map[string]string{}
	}
	f.tags[ref] = id
}

func (f *Fake) CreateSandbox(ctx context.Context, req SandboxRequest) (_ Sandbox, err error) {
	// The Fake's readback is the create itself: its span stands for the
	// Adapter's, so a trace has the same shape on either engine.
	_, span := readbackSpan(ctx, Sandbox{ID: req.ID}, RoleWorkload, false)
	defer func() { endSpan(span, err) }()
	if err := f.enter(ctx, "CreateSandbox"); err != nil {
		return Sandbox{}, err
	}
	if err := checkSandboxRequest(req); err != nil {
		return Sandbox{}, err
	}
	if len(req.Spec.Datasets) > 0 && !f.Profile.Datasets {
		return Sandbox{}, unsupported("dockerio.datasets", "profile %s does not admit image datasets", f.Profile.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := req.Owner + "/" + req.ID
	if s, ok := f.sandboxes[key]; ok {
		return s.sb, nil // adopted by name
	}
	sb := Sandbox{Owner: req.Owner, ID: req.ID, Spec: req.Spec, Revision: f.Profile.Revision(),
		Workload: f.id("w"), Export: f.id("e"), Volume: Name(req.Owner, req.ID, RoleVolume)}
	switch req.Spec.Policy.Network.Canonical() {
	case spec.NetworkOpen:
		sb.Network = f.id("n")
	case spec.NetworkAllowlist:
		sb.Network, sb.Outside, sb.Egress, sb.Proxy = f.id("n"), f.id("o"), f.id("x"), "10.213.0.2:3128"
	default:
		// isolated and bridge: no egress container, no outside network
	}
	f.sandboxes[key] = &fakeSandbox{sb: sb, files: map[string]fakeFile{"work/": {mode: 0o755}}, removed: map[string]bool{}, exit: &ContainerExit{}}
	return sb, nil
}

// get returns the sandbox whose workload container is present (not_found,
// as Docker says of a container, otherwise). f.mu is held.
func (f *Fake) get(sb Sandbox) (*fakeSandbox, error) {
	s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]
	if !ok || s.removed[s.sb.Workload] {
		return nil, spec.Errorf(spec.CodeNotFound, "dockerio.fake", "sandbox %s: no such container", sb.ID)
	}
	return s, nil
}

// with runs fn on the sandbox under f.mu, after enter.
func (f *Fake) with(ctx context.Context, op string, sb Sandbox, fn func(s *fakeSandbox) error) error {
	if err := f.enter(ctx, op); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(sb)
	if err != nil {
		return err
	}
	return fn(s)
}

func (f *Fake) StartSandbox(ctx context.Context, sb Sandbox) (err error) {
	_, span := readbackSpan(ctx, sb, RoleWorkload, true)
	defer func() { endSpan(span, err) }()
	return f.with(ctx, "StartSandbox", sb, func(s *fakeSandbox) error {
		s.running, s.exit = true, nil
		s.use = CgroupSample{} // a new run: a new cgroup
		return nil
	})
}

func (f *Fake) VerifySandbox(ctx context.Context, sb Sandbox) error {
	return f.with(ctx, "VerifySandbox", sb, func(s *fakeSandbox) error {
		if !s.running {
			return unsupported("dockerio.verify", "%s %s: State.Running differs: got false, want true", RoleWorkload, Name(sb.Owner, sb.ID, RoleWorkload))
		}
		if sb.Revision != s.sb.Revision {
			return unsupported("dockerio.verify", "sandbox %s has revision %s, not %s", sb.ID, sb.Revision, s.sb.Revision)
		}
		return nil
	})
}

func (f *Fake) StopSandbox(ctx context.Context, sb Sandbox, grace time.Duration) (ContainerExit, error) {
	if err := f.enter(ctx, "StopSandbox"); err != nil {
		return ContainerExit{}, err
	}
	f.mu.Lock()
	s, err := f.get(sb)
	if err != nil {
		f.mu.Unlock()
		return ContainerExit{ExitCode: -1}, nil // already gone: stopped
	}
	if !s.running { // never started, or stopped: Docker leaves it as it is
		exit := *s.exit
		f.mu.Unlock()
		return exit, nil
	}
	// Docker thaws before it stops; the workload's init passes TERM on.
	s.running, s.paused = false, false
	s.exit = &ContainerExit{ExitCode: 128 + int(syscall.SIGTERM)}
	exit := *s.exit
	var kill []*fakeExec
	for _, x := range f.execs {
		if x.sb == sb.Owner+"/"+sb.ID && !x.done {
			kill = append(kill, x)
		}
	}
	wardens := s.takeWardens()
	f.mu.Unlock()
	for _, x := range kill {
		x.signal(syscall.SIGKILL)
	}
	stopWardens(wardens)
	f.publish(sb.Owner, ContainerEvent{Action: ActionDie, Container: s.sb.Workload, Sandbox: sb.ID, Role: RoleWorkload, ExitCode: exit.ExitCode})
	return exit, nil
}

func (f *Fake) RemoveSandbox(ctx context.Context, sb Sandbox) error {
	if err := f.enter(ctx, "RemoveSandbox"); err != nil {
		return err
	}
	if err := checkSandboxIDs(sb.Owner, sb.ID); err != nil {
		return err
	}
	f.mu.Lock()
	var wardens []*fakeWarden
	if s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]; ok {
		wardens = s.takeWardens()
	}
	delete(f.sandboxes, sb.Owner+"/"+sb.ID)
	f.mu.Unlock()
	stopWardens(wardens)
	return nil
}

func (f *Fake) PutArchive(ctx context.Context, sb Sandbox, dir string, r io.Reader) error {
	if err := f.enter(ctx, "PutArchive"); err != nil {
		return err
	}
	dst, err := archivePath(dir)
	if err != nil {
		return err
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(dst, WorkspaceDir), "/")
	spooled, err := spool(ctx, r, sb.Spec.Policy.User, dst == WorkspaceDir)
	if err != nil {
		return err
	}
	defer func() { _ = spooled.Close() }() // only read
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.export(sb)
	if err != nil {
		return err
	}
	if _, ok := s.files[rel+"/"]; rel != "" && !ok {
		return spec.Errorf(spec.CodeNotFound, "dockerio.archive", "directory %s does not exist: make it first (Sandbox.Files().MkdirAll), or put into one that does", dst)
	}
	tr := tar.NewReader(spooled)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "dockerio.archive", err, "reading the archive")
		}
		// The name is a key of an in-memory map, and spool refused every
		// entry leaving the destination, as for the real adapter.
		name := path.Join(rel, h.Name) //nolint:gosec // G305: see above
		if h.Typeflag == tar.TypeDir {
			s.files[name+"/"] = fakeFile{mode: h.Mode & 0o7777}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "dockerio.archive", err, "reading the archive")
		}
		s.files[name] = fakeFile{data: b, mode: h.Mode & 0o7777}
	}
}

// PauseSandbox freezes the fake workload: execs are refused until
// UnpauseSandbox, as Docker refuses them.
func (f *Fake) PauseSandbox(ctx context.Context, sb Sandbox) error {
	return f.with(ctx, "PauseSandbox", sb, func(s *fakeSandbox) error {
		if !s.running || s.paused {
			return spec.Errorf(spec.CodeConflict, "dockerio.fake", "workload %s is not running or already paused", sb.Workload)
		}
		s.paused = true
		return nil
	})
}

func (f *Fake) UnpauseSandbox(ctx context.Context, sb Sandbox) error {
	if err := f.enter(ctx, "UnpauseSandbox"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]; ok {
		s.paused = false
	}
	return nil
}

// export returns the sandbox whose export container is present. f.mu is
// held.
func (f *Fake) export(sb Sandbox) (*fakeSandbox, error) {
	s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]
	if !ok || s.removed[s.sb.Export] {
		return nil, spec.Errorf(spec.CodeNotFound, "dockerio.fake", "sandbox %s: no such container", sb.ID)
	}
	return s, nil
}

// Paused reports whether the fake workload is paused.
func (f *Fake) Paused(sb Sandbox) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]
	return ok && s.paused
}

func (f *Fake) GetArchive(ctx context.Context, sb Sandbox, p string) (io.ReadCloser, error) {
	if err := f.enter(ctx, "GetArchive"); err != nil {
		return nil, err
	}
	src, err := archivePath(p)
	if err != nil {
		return nil, err
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(src, WorkspaceDir), "/")
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.export(sb)
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range s.files {
		if rel == "" || n == rel || n == rel+"/" || strings.HasPrefix(n, rel+"/") {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, spec.Errorf(spec.CodeNotFound, "dockerio.archive", "%s does not exist", src)
	}
	sort.Strings(names)
	// Entries are named as Docker names them: from the basename of src on
	// (so a Get of the workspace itself starts with "workspace/", its root
	// entry root's, as a fresh volume's root is).
	parent := strings.TrimPrefix(path.Dir(src), "/")
	if parent != "" {
		parent += "/"
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	fail := func(err error) (io.ReadCloser, error) {
		return nil, spec.Wrap(spec.CodeInternal, "dockerio.archive", err, "building the archive of %s", src)
	}
	if rel == "" {
		if err := tw.WriteHeader(&tar.Header{Name: path.Base(WorkspaceDir) + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return fail(err)
		}
	}
	u := sb.Spec.Policy.User
	for _, n := range names {
		name := strings.TrimPrefix(strings.TrimPrefix(WorkspaceDir, "/")+"/"+n, parent)
		file := s.files[n]
		h := &tar.Header{Name: name, Uid: int(u.UID), Gid: int(u.GID), Mode: file.mode, Typeflag: tar.TypeReg, Size: int64(len(file.data))}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return fail(err)
		}
		if _, err := tw.Write(file.data); err != nil {
			return fail(err)
		}
	}
	if err := tw.Close(); err != nil {
		return fail(err)
	}
	return io.NopCloser(&buf), nil
}

func (f *Fake) ListOwned(ctx context.Context, owner string) ([]Owned, error) {
	if err := f.enter(ctx, "ListOwned"); err != nil {
		return nil, err
	}
	if err := checkID("owner", owner); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Owned
	for _, s := range f.sandboxes {
		if s.sb.Owner == owner {
			out = append(out, Owned{Sandbox: s.sb.ID, Resources: s.resources()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sandbox < out[j].Sandbox })
	return out, nil
}

// resources lists the sandbox's resources still present, labelled as the
// Adapter labels them. f.mu is held.
func (s *fakeSandbox) resources() []Resource {
	sb := s.sb
	var rs []Resource
	add := func(k Kind, id string, role Role) {
		if id != "" && !s.removed[id] {
			rs = append(rs, resource(k, id, Name(sb.Owner, sb.ID, role), Labels(sb.Owner, sb.ID, role, sb.Revision)))
		}
	}
	add(KindContainer, sb.Workload, RoleWorkload)
	add(KindContainer, sb.Export, RoleExport)
	add(KindVolume, sb.Volume, RoleVolume)
	add(KindNetwork, sb.Network, RoleNetwork)
	return rs
}

func (f *Fake) InspectSandbox(ctx context.Context, sb Sandbox) (Observed, error) {
	if err := f.enter(ctx, "InspectSandbox"); err != nil {
		return Observed{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]
	if !ok {
		return Observed{}, nil
	}
	obs := Observed{Present: s.resources()}
	if s.removed[s.sb.Workload] {
		return obs, nil
	}
	obs.Running, obs.Paused, obs.Revision = s.running, s.paused, s.sb.Revision
	if !s.running && s.exit != nil {
		e := *s.exit
		obs.Exit = &e
	}
	return obs, nil
}

// RemoveOwned removes one resource, found by its id, if it still carries
// r.Owner (conflict otherwise, as the Adapter re-reads the label).
func (f *Fake) RemoveOwned(ctx context.Context, r Resource) error {
	if err := f.enter(ctx, "RemoveOwned"); err != nil {
		return err
	}
	if r.Owner == "" {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.remove", "resource %s has no owner", r.ID)
	}
	var wardens []*fakeWarden
	defer func() { stopWardens(wardens) }() // after f.mu is released
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, s := range f.sandboxes {
		for _, have := range s.resources() {
			if have.Kind != r.Kind || have.ID != r.ID {
				continue
			}
			if have.Owner != r.Owner {
				return spec.Errorf(spec.CodeConflict, "dockerio.remove", "%s %s carries owner %q, not %q: not touched", r.Kind, r.ID, have.Owner, r.Owner)
			}
			s.removed[r.ID] = true
			if r.ID == s.sb.Workload {
				s.running, s.paused, s.exit = false, false, nil
				wardens = s.takeWardens()
			}
			if len(s.resources()) == 0 {
				delete(f.sandboxes, key)
			}
			return nil
		}
	}
	return nil
}

// SetExited marks a sandbox's workload as exited (a crash or OOM seen by
// reconcile) and sends a die event to the owner's subscribers.
func (f *Fake) SetExited(sb Sandbox, exit ContainerExit) {
	f.mu.Lock()
	s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]
	var wardens []*fakeWarden
	if ok {
		s.running, s.exit = false, &exit
		wardens = s.takeWardens()
	}
	f.mu.Unlock()
	stopWardens(wardens)
	if !ok {
		return
	}
	f.publish(sb.Owner, ContainerEvent{Action: ActionDie, Container: s.sb.Workload, Sandbox: sb.ID, Role: RoleWorkload, ExitCode: exit.ExitCode})
}

// publish sends ev, stamped now, to the owner's Events subscribers.
func (f *Fake) publish(owner string, ev ContainerEvent) {
	ev.Time = time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.subs[owner] {
		select {
		case c <- ev:
		default: // a subscriber that does not keep up misses it, as with the daemon
		}
	}
}

// pausedErr is what Docker answers an exec into a paused workload (key is
// owner/id). f.mu is held.
func (f *Fake) pausedErr(key string) error {
	if s, ok := f.sandboxes[key]; ok && s.paused {
		return spec.Wrap(spec.CodeConflict, "dockerio.fake", ErrPaused, "container %s is paused, unpause the container before exec", s.sb.Workload)
	}
	return nil
}

// OOMKills reports the sandbox's count of processes ended with FakeRun.OOM.
func (f *Fake) OOMKills(ctx context.Context, sb Sandbox) (int64, error) {
	var n int64
	err := f.with(ctx, "OOMKills", sb, func(s *fakeSandbox) error {
		if err := f.pausedErr(sb.Owner + "/" + sb.ID); err != nil {
			return err
		}
		n = s.oomKills
		return nil
	})
	return n, err
}

// Events subscribes to the die events of stops and SetExited and the
// exec_die events of ending execs (the fake keeps no history: since is
// ignored). The event channel is closed when ctx ends.
func (f *Fake) Events(ctx context.Context, owner string, since time.Time) (<-chan ContainerEvent, <-chan error) {
	errc := make(chan error, 1)
	c := make(chan ContainerEvent, 1024)
	if err := f.enter(ctx, "Events"); err != nil {
		errc <- err
		close(c)
		return c, errc
	}
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[string][]chan ContainerEvent{}
	}
	f.subs[owner] = append(f.subs[owner], c)
	f.mu.Unlock()
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.subs[owner] = slices.DeleteFunc(f.subs[owner], func(x chan ContainerEvent) bool { return x == c })
		close(c)
	})
	return c, errc
}

// errFakeNoWarden: a Fake with NoWarden runs its processes as execs.
var errFakeNoWarden = spec.Errorf(spec.CodeUnsupported, "dockerio.warden", "this fake engine has no warden (NoWarden)")

// OpenEgress: the fake runs no egress proxy.
func (f *Fake) OpenEgress(ctx context.Context, sb Sandbox, stderr io.Writer) (WardenConn, error) {
	if sb.Egress == "" {
		return WardenConn{}, spec.Errorf(spec.CodeConflict, "dockerio.egress", "sandbox %s has no egress container", sb.ID)
	}
	return WardenConn{}, spec.Errorf(spec.CodeUnsupported, "dockerio.fake", "the fake engine runs no egress proxy")
}

// EnsureEgress: the fake's egress role is whole while the sandbox exists.
func (f *Fake) EnsureEgress(ctx context.Context, sb Sandbox) (Sandbox, bool, error) {
	if err := f.enter(ctx, "EnsureEgress"); err != nil {
		return sb, false, err
	}
	return sb, false, nil
}
