package spec

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const img = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// wantInvalid checks err: nil when want is "", else invalid_argument whose
// message contains want.
func wantInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("valid input refused: %v", err)
		}
		return
	}
	if !IsCode(err, CodeInvalidArgument) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want invalid_argument with %q", err, want)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Policy)
		field  string // "" means valid
	}{
		{"default", func(*Policy) {}, ""},
		{"zero cpus", func(p *Policy) { p.CPUs = 0 }, "cpus"},
		{"NaN cpus", func(p *Policy) { p.CPUs = math.NaN() }, "cpus"},
		{"inf cpus", func(p *Policy) { p.CPUs = math.Inf(1) }, "cpus"},
		{"negative memory", func(p *Policy) { p.MemoryBytes = -1 }, "memory_bytes"},
		{"zero pids", func(p *Policy) { p.Pids = 0 }, "pids"},
		{"zero home", func(p *Policy) { p.HomeBytes = 0 }, "home_bytes"},
		{"zero tmp", func(p *Policy) { p.TmpBytes = 0 }, "tmp_bytes"},
		{"network", func(p *Policy) { p.Network = "host" }, "network"},
		{"uid", func(p *Policy) { p.User.UID = -5 }, "user.uid"},
		{"gid", func(p *Policy) { p.User.GID = 1 << 33 }, "user.gid"},
		{"root", func(p *Policy) { p.User.UID = 0 }, "root"},
		{"bridge", func(p *Policy) { p.Network = NetworkBridge }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			tc.mutate(&p)
			wantInvalid(t, p.Validate(), tc.field)
		})
	}
}

func TestSandboxValidate(t *testing.T) {
	ok := Sandbox{Image: img, Policy: DefaultPolicy(), Lifetime: Kept}
	for _, tc := range []struct {
		name   string
		mutate func(*Sandbox)
		want   string
	}{
		{"ok", func(*Sandbox) {}, ""},
		{"tag", func(s *Sandbox) { s.Image = "busybox:latest" }, "not pinned"},
		{"short id", func(s *Sandbox) { s.Image = "sha256:abc" }, "not pinned"},
		{"upper hex", func(s *Sandbox) { s.Image = strings.ToUpper(img) }, "not pinned"},
		{"lifetime", func(s *Sandbox) { s.Lifetime = "" }, "lifetime"},
		{"ttl", func(s *Sandbox) { s.TTL = -time.Second }, "ttl"},
		{"dataset tag", func(s *Sandbox) { s.Datasets = []Dataset{{Image: "x", Target: "/data"}} }, "datasets[0].image"},
		{"dataset relative", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "data"}} }, "absolute"},
		{"dataset dotdot", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/a/../tmp"}} }, "absolute"},
		{"dataset over workspace", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/workspace/x"}} }, "overlaps"},
		{"dataset twice", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/d"}, {Image: img, Target: "/d"}} }, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mutate(&s)
			wantInvalid(t, s.Validate(), tc.want)
		})
	}
}

func TestProcessValidate(t *testing.T) {
	ok := Process{Argv: []string{"true"}, Stdout: Pipe, Stderr: Discard}
	for _, tc := range []struct {
		name   string
		mutate func(*Process)
		want   string
	}{
		{"ok", func(*Process) {}, ""},
		{"no argv", func(p *Process) { p.Argv = nil }, "argv is empty"},
		{"empty argv0", func(p *Process) { p.Argv = []string{""} }, "argv is empty"},
		{"nul", func(p *Process) { p.Argv = []string{"a", "b\x00"} }, "argv[1]"},
		{"env", func(p *Process) { p.Env = []string{"=x"} }, "env[0]"},
		{"dir", func(p *Process) { p.Dir = "rel" }, "dir"},
		{"stdout", func(p *Process) { p.Stdout = "tee" }, "stdout mode"},
		{"timeout", func(p *Process) { p.Timeout = -1 }, "timeout"},
		{"quota", func(p *Process) { p.OutputQuota = -1 }, "output_quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			tc.mutate(&p)
			wantInvalid(t, p.Validate(), tc.want)
		})
	}
}

func TestErrorMatching(t *testing.T) {
	cause := errors.New("disk full")
	err := Wrap(CodeJournal, "journal.append", cause, "sandbox %s", "x")
	if !errors.Is(err, ErrJournal) || errors.Is(err, ErrTimeout) || !errors.Is(err, cause) || CodeOf(err) != CodeJournal {
		t.Fatalf("matching broken: %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Op != "journal.append" {
		t.Fatal("errors.As")
	}
	if got := err.Error(); got != "journal.append: journal: sandbox x: disk full" {
		t.Fatalf("message %q", got)
	}
	if CodeOf(cause) != "" || IsCode(nil, CodeJournal) {
		t.Fatal("untyped errors have no code")
	}
}

// FuzzSandboxSpec: a sandbox spec as untrusted JSON (a policy file, an API
// request) is either refused with a typed error or valid, never a panic; a
// valid one survives a JSON round trip still valid.
func FuzzSandboxSpec(f *testing.F) {
	good, _ := json.Marshal(Sandbox{Image: img, Policy: DefaultPolicy(), Lifetime: OneShot})
	f.Add(good)
	f.Add([]byte(`{"image":"` + img + `","policy":{"cpus":1e308,"memory_bytes":-1},"lifetime":"kept"}`))
	f.Add([]byte(`{"policy":{"user":{"uid":4294967295}},"datasets":[{"image":"","target":"/"}]}`))
	f.Add([]byte(`{"ttl":-9223372036854775808}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Sandbox
		if json.Unmarshal(b, &s) != nil {
			return
		}
		err := s.Validate()
		if err != nil {
			if !IsCode(err, CodeInvalidArgument) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, _ := json.Marshal(s)
		var s2 Sandbox
		if err := json.Unmarshal(again, &s2); err != nil || s2.Validate() != nil {
			t.Fatalf("a valid spec did not survive a round trip: %v", err)
		}
	})
}
