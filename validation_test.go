package stockade_test

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// opLog records the Engine calls a Fake sees, but for the event watcher's
// subscription, which Open starts in the background.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) record(op string) error {
	if op == "Events" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, op)
	return nil
}

func (l *opLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := l.ops
	l.ops = nil
	return ops
}

// streams lists the journal's streams of a kind.
func streams(t *testing.T, rt *stockade.Runtime, kind journal.Kind) []string {
	t.Helper()
	var ids []string
	err := stockade.JournalOf(rt).Streams(func(k journal.Key) error {
		if k.Kind == kind {
			ids = append(ids, k.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestFakeBadSpecCostsNothing: a spec refused for its shape or its policy
// costs no journal event and no Docker call, however far into it the fault
// lies (a tag is not resolved before the rest is judged).
func TestFakeBadSpecCostsNothing(t *testing.T) {
	f := testutil.NewFake(t)
	var log opLog
	f.Fault = log.record
	rt := testutil.OpenFake(t, f, "")
	log.take() // Open's own calls
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		spec spec.Sandbox
		code spec.Code
	}{
		{"memory below Docker's minimum", spec.Sandbox{Image: "toolbox:dev", Policy: spec.Policy{MemoryBytes: 1000}}, spec.CodeUnsupported},
		{"memory not whole pages", spec.Sandbox{Image: fakeImage, Policy: spec.Policy{MemoryBytes: 1<<30 + 1}}, spec.CodeUnsupported},
		{"negative pids", spec.Sandbox{Image: "toolbox:dev", Policy: spec.Policy{Pids: -1}}, spec.CodeInvalidArgument},
		{"egress rules on an open network", spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkOpen, Egress: egressRules(t, "a.example:443")}}, spec.CodeInvalidArgument},
		{"egress rules on an isolated network", spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkIsolated, Egress: egressRules(t, "a.example:443")}}, spec.CodeInvalidArgument},
		{"half a user", spec.Sandbox{Image: "toolbox:dev", Policy: spec.Policy{User: spec.User{UID: 1000}}}, spec.CodeInvalidArgument},
		{"dataset onto the workspace", spec.Sandbox{Image: "toolbox:dev", Datasets: []spec.Dataset{{Image: fakeImage, Target: "/a/../workspace"}}}, spec.CodeInvalidArgument},
		{"lifetime", spec.Sandbox{Image: "toolbox:dev", Lifetime: "forever"}, spec.CodeInvalidArgument},
		{"nul in the image", spec.Sandbox{Image: "toolbox\x00:dev"}, spec.CodeInvalidArgument},
		{"no image", spec.Sandbox{}, spec.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rt.CreateSandbox(ctx, tc.spec); !spec.IsCode(err, tc.code) {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if ops := log.take(); len(ops) != 0 {
				t.Fatalf("Docker was asked %q", ops)
			}
			if ids := streams(t, rt, journal.KindSandbox); len(ids) != 0 {
				t.Fatalf("journaled sandboxes %q", ids)
			}
		})
	}
}

// TestFakeBadProcessCostsNothing: a process refused for its shape or its
// size costs no journal event and no Docker call.
func TestFakeBadProcessCostsNothing(t *testing.T) {
	f := testutil.NewFake(t)
	var log opLog
	f.Fault = log.record
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	log.take()
	huge := strings.Repeat("a", spec.MaxArgBytes)
	for _, tc := range []struct {
		name string
		p    spec.Process
	}{
		{"env name", spec.Process{Argv: []string{"env"}, Env: []string{"1X=y"}}},
		{"env without equals", spec.Process{Argv: []string{"env"}, Env: []string{"NOEQUALS"}}},
		{"argv and env too big", spec.Process{Argv: []string{"echo", huge}, Env: []string{"A=" + huge}}},
		{"too many args", spec.Process{Argv: slices.Repeat([]string{"x"}, spec.MaxArgs+1)}},
		{"nul in dir", spec.Process{Argv: []string{"pwd"}, Dir: "/workspace\x00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sb.Start(ctx, tc.p); !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("got %v, want invalid_argument", err)
			}
			if ops := log.take(); len(ops) != 0 {
				t.Fatalf("Docker was asked %q", ops)
			}
			if ids := streams(t, rt, journal.KindProcess); len(ids) != 0 {
				t.Fatalf("journaled processes %q", ids)
			}
		})
	}
}

// TestFakePartialPolicy: a policy that states only what differs gets the
// defaults for the rest, and what is journaled is the whole policy.
func TestFakePartialPolicy(t *testing.T) {
	rt := testutil.OpenFake(t, testutil.NewFake(t), "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{MemoryBytes: 1 << 30}})
	st, err := stockade.FoldSandbox(rt, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	want := spec.DefaultPolicy()
	want.MemoryBytes = 1 << 30
	if !reflect.DeepEqual(st.Spec.Policy, want) {
		t.Fatalf("journaled policy %+v, want %+v", st.Spec.Policy, want)
	}
}

// TestFakeDatasetTargetJournaledClean: the target journaled (and mounted)
// is the cleaned one that was validated.
func TestFakeDatasetTargetJournaledClean(t *testing.T) {
	f := testutil.NewFake(t)
	f.Profile.Datasets = true
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Datasets: []spec.Dataset{{Image: fakeImage, Target: "//data/./v1/"}}})
	st, err := stockade.FoldSandbox(rt, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Spec.Datasets[0].Target; got != "/data/v1" {
		t.Fatalf("journaled target %q", got)
	}
}

// TestSpecLimitsFitTheJournal: spec's bounds on a process keep its largest
// reserved event, encoded, under the journal's record limit. spec cannot
// see the journal, so the two constants are checked against each other
// here. '<' is the costliest byte JSON writes (\u003c, six bytes).
func TestSpecLimitsFitTheJournal(t *testing.T) {
	worst := func(n int) string { return strings.Repeat("<", n) }
	// Every byte of the argv+env budget spent on content.
	var long spec.Process
	for left := spec.MaxArgvEnvBytes; left > 0; {
		n := min(spec.MaxArgBytes, left-1)
		long.Argv = append(long.Argv, worst(n))
		left -= n + 1
	}
	long.Env = []string{"A=" + worst(spec.MaxArgBytes-2)}
	long.Argv = long.Argv[:len(long.Argv)-1] // room for the env entry
	// As many strings as allowed, the rest of the budget in them.
	var many spec.Process
	per := spec.MaxArgvEnvBytes/(spec.MaxArgs+spec.MaxEnv) - 1
	for range spec.MaxArgs {
		many.Argv = append(many.Argv, worst(per))
	}
	for range spec.MaxEnv {
		many.Env = append(many.Env, "A="+worst(per-2))
	}
	for name, p := range map[string]spec.Process{"long strings": long, "many strings": many} {
		p.Dir = "/" + worst(spec.MaxPathBytes-1)
		p.Stdout, p.Stderr = spec.Pipe, spec.Pipe
		p.Timeout, p.OutputQuota = time.Hour, 1<<62
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: the maximal spec is not valid: %v", name, err)
		}
		_, b, err := lifecycle.Encode(lifecycle.ProcessReserved{Sandbox: strings.Repeat("s", 64), Spec: p, Deadline: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > journal.MaxPayload {
			t.Errorf("%s: a maximal process encodes to %d bytes, over the journal's %d", name, len(b), journal.MaxPayload)
		}
		t.Logf("%s: %d bytes of %d", name, len(b), journal.MaxPayload)
	}
	// And a maximal sandbox.
	s := spec.Sandbox{Image: fakeImage, Policy: spec.DefaultPolicy(), Lifetime: spec.Kept}
	for i := range spec.MaxDatasets {
		s.Datasets = append(s.Datasets, spec.Dataset{Image: fakeImage, Target: "/" + string(rune('a'+i%26)) + strings.Repeat("<", spec.MaxPathBytes-4) + string(rune('a'+i/26))})
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("the maximal sandbox is not valid: %v", err)
	}
	_, b, err := lifecycle.Encode(lifecycle.SandboxReserved{Owner: strings.Repeat("o", 64), Spec: s, Profile: "linux-x64", Revision: strings.Repeat("r", 128)})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > journal.MaxPayload {
		t.Errorf("a maximal sandbox encodes to %d bytes, over the journal's %d", len(b), journal.MaxPayload)
	}
}

// blockingReader's Read blocks until released; reading is closed once a
// Read waits.
type blockingReader struct {
	reading, release chan struct{}
	once             sync.Once
}

func (b *blockingReader) Read([]byte) (int, error) {
	b.once.Do(func() { close(b.reading) })
	<-b.release
	return 0, bytes.ErrTooLarge
}

// TestFakePutHonoursContext: a put whose archive never arrives returns when
// its context ends, and the sandbox goes on serving.
func TestFakePutHonoursContext(t *testing.T) {
	rt := testutil.OpenFake(t, testutil.NewFake(t), "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	r := &blockingReader{reading: make(chan struct{}), release: make(chan struct{})}
	defer close(r.release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sb.Put(ctx, "work", r) }()
	<-r.reading // the put waits on the reader, not before it
	cancel()
	if err := <-done; !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("got %v, want cancelled", err)
	}
	if _, err := sb.State(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Put(context.Background(), "../x", bytes.NewReader(nil)); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("escaping dir: %v", err)
	}
}
