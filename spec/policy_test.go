package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
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
		{"dataset dotdot", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/a/../tmp"}} }, "overlaps /tmp"},
		{"dataset over workspace", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/workspace/x"}} }, "overlaps"},
		{"dataset twice", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/d"}, {Image: img, Target: "/d"}} }, "twice"},
		{"dataset twice once cleaned", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/d"}, {Image: img, Target: "//d/"}} }, "twice"},
		{"dataset double slash over workspace", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "//workspace"}} }, "overlaps /workspace"},
		{"dataset trailing slash over workspace", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/workspace/"}} }, "overlaps /workspace"},
		{"dataset dotdot onto workspace", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/a/../workspace"}} }, "overlaps /workspace"},
		{"dataset above root", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/../data"}} }, "absolute path below /"},
		{"dataset root", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "//"}} }, "absolute path below /"},
		{"dataset dotdot inside a name", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/data..v2/..x"}} }, ""},
		{"dataset nul", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/da\x00ta"}} }, "NUL"},
		{"dataset long target", func(s *Sandbox) {
			s.Datasets = []Dataset{{Image: img, Target: "/" + strings.Repeat("d", MaxPathBytes)}}
		}, "over the limit of 4095"},
		{"too many datasets", func(s *Sandbox) {
			for i := range MaxDatasets + 1 {
				s.Datasets = append(s.Datasets, Dataset{Image: img, Target: fmt.Sprintf("/d%d", i)})
			}
		}, "over the limit of 64"},
		{"image nul", func(s *Sandbox) { s.Image = img[:10] + "\x00" + img[11:] }, "not pinned"},
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
		{"env no equals", func(p *Process) { p.Env = []string{"A=1", "NOEQUALS"} }, "env[1]"},
		{"env digit first", func(p *Process) { p.Env = []string{"1X=y"} }, "env[0]"},
		{"env dash", func(p *Process) { p.Env = []string{"A-B=y"} }, "env[0]"},
		{"env space", func(p *Process) { p.Env = []string{"A B=y"} }, "env[0]"},
		{"env nul in value", func(p *Process) { p.Env = []string{"A=\x00"} }, "env[0] contains a NUL"},
		{"env ok", func(p *Process) { p.Env = []string{"_A1=", "b_=x=y", "Z=\u00e9"} }, ""},
		{"argv count", func(p *Process) { p.Argv = make([]string, MaxArgs+1); p.Argv[0] = "x" }, "argv has 4097 strings, over the limit of 4096"},
		{"argv count at limit", func(p *Process) { p.Argv = make([]string, MaxArgs); p.Argv[0] = "x" }, ""},
		{"env count", func(p *Process) { p.Env = slices.Repeat([]string{"A=1"}, MaxEnv+1) }, "env has 1025 entries, over the limit of 1024"},
		{"argv string", func(p *Process) { p.Argv = []string{"x", strings.Repeat("a", MaxArgBytes+1)} }, "argv[1] is 131072 bytes, over the limit of 131071"},
		{"env string", func(p *Process) { p.Env = []string{"A=" + strings.Repeat("a", MaxArgBytes)} }, "env[0] is 131073 bytes"},
		{"argv+env total", func(p *Process) {
			p.Argv = []string{"x", strings.Repeat("a", MaxArgBytes)}
			p.Env = []string{"A=" + strings.Repeat("a", MaxArgBytes-2)}
		}, "argv and env are 262146 bytes together, over the limit of 262144"},
		{"argv+env total at limit", func(p *Process) {
			p.Argv = []string{"x", strings.Repeat("a", MaxArgBytes)}
			p.Env = []string{"A=" + strings.Repeat("a", MaxArgvEnvBytes-2-MaxArgBytes-1-3)}
		}, ""},
		{"dir nul", func(p *Process) { p.Dir = "/a\x00" }, "dir \"/a\\x00\" contains a NUL"},
		{"dir long", func(p *Process) { p.Dir = "/" + strings.Repeat("d", MaxPathBytes) }, "dir is 4096 bytes, over the limit of 4095"},
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

func TestPolicyWithDefaults(t *testing.T) {
	d := DefaultPolicy()
	for _, tc := range []struct {
		name string
		in   Policy
		want Policy
		err  string // "" means valid
	}{
		{"zero is the default", Policy{}, d, ""},
		{"memory only", Policy{MemoryBytes: 1 << 30}, func() Policy { p := d; p.MemoryBytes = 1 << 30; return p }(), ""},
		{"bridge only", Policy{Network: NetworkBridge}, func() Policy { p := d; p.Network = NetworkOpen; return p }(), ""},
		{"user given", Policy{User: User{UID: 1000, GID: 1000}}, func() Policy { p := d; p.User = User{1000, 1000}; return p }(), ""},
		// A half-given user is not completed: its zero id is root's.
		{"uid only", Policy{User: User{UID: 1000}}, func() Policy { p := d; p.User = User{UID: 1000}; return p }(), "root"},
		{"gid only", Policy{User: User{GID: 1000}}, func() Policy { p := d; p.User = User{GID: 1000}; return p }(), "root"},
		{"negative kept", Policy{Pids: -1}, func() Policy { p := d; p.Pids = -1; return p }(), "pids"},
		{"NaN kept", Policy{CPUs: math.NaN()}, Policy{}, "cpus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.WithDefaults()
			if !reflect.DeepEqual(tc.want, Policy{}) && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if got.User.UID == 0 && got.User.GID == 0 {
				t.Fatalf("defaults produced root: %+v", got)
			}
			wantInvalid(t, got.Validate(), tc.err)
		})
	}
}

func TestSandboxWithDefaults(t *testing.T) {
	in := Sandbox{Image: img, Datasets: []Dataset{{Image: img, Target: "//data/"}, {Image: img, Target: "/a/../b"}, {Image: img, Target: "rel"}}}
	got := in.WithDefaults()
	if got.Lifetime != Kept || !reflect.DeepEqual(got.Policy, DefaultPolicy()) {
		t.Fatalf("defaults: %+v", got)
	}
	var targets []string
	for _, d := range got.Datasets {
		targets = append(targets, d.Target)
	}
	// A target that cannot be cleaned is kept for Validate to refuse.
	if want := []string{"/data", "/b", "rel"}; !slices.Equal(targets, want) {
		t.Fatalf("targets %q, want %q", targets, want)
	}
	if in.Datasets[0].Target != "//data/" {
		t.Fatal("WithDefaults changed the caller's datasets")
	}
}

func TestValidateUnpinned(t *testing.T) {
	ok := Sandbox{Image: "busybox:latest", Policy: DefaultPolicy(), Lifetime: Kept}
	for _, tc := range []struct {
		name   string
		mutate func(*Sandbox)
		want   string
	}{
		{"tag", func(*Sandbox) {}, ""},
		{"id", func(s *Sandbox) { s.Image = img }, ""},
		{"empty", func(s *Sandbox) { s.Image = "" }, "no image"},
		{"nul", func(s *Sandbox) { s.Image = "busybox\x00" }, "NUL"},
		{"space", func(s *Sandbox) { s.Image = "busy box" }, "space"},
		{"long", func(s *Sandbox) { s.Image = strings.Repeat("b", MaxImageRefBytes+1) }, "over the limit of 1024"},
		{"bad policy", func(s *Sandbox) { s.Policy.MemoryBytes = -1 }, "memory_bytes"},
		{"bad dataset", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/tmp"}} }, "overlaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mutate(&s)
			wantInvalid(t, s.ValidateUnpinned(), tc.want)
		})
	}
}

func TestCleanRelPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", ".", true},
		{".", ".", true},
		{"a/b/", "a/b", true},
		{"a//./b", "a/b", true},
		{"..foo", "..foo", true},
		{"a/..b", "a/..b", true},
		{"a/b..", "a/b..", true},
		{"...", "...", true},
		{"a/../b", "b", true},
		{"a/..", ".", true},
		{"..", "", false},
		{"../x", "", false},
		{"a/../../x", "", false},
		{"a/../..", "", false},
		{"/etc", "", false},
		{"a\x00b", "", false},
	} {
		got, ok := CleanRelPath(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CleanRelPath(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
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
	// Partial policies: zero fields default, a half-given user stays refused.
	f.Add([]byte(`{"image":"` + img + `","policy":{"memory_bytes":1073741824},"lifetime":"kept"}`))
	f.Add([]byte(`{"image":"` + img + `","policy":{"user":{"uid":1000}}}`))
	f.Add([]byte(`{"image":"` + img + `","policy":{"network":"bridge","cpus":0.5}}`))
	// Dataset targets that clean onto a reserved path, climb above /, or
	// merely hold ".." inside a name.
	f.Add([]byte(`{"image":"` + img + `","datasets":[{"image":"` + img + `","target":"//workspace"}]}`))
	f.Add([]byte(`{"image":"` + img + `","datasets":[{"image":"` + img + `","target":"/a/../tmp/"}]}`))
	f.Add([]byte(`{"image":"` + img + `","datasets":[{"image":"` + img + `","target":"/../../data"}]}`))
	f.Add([]byte(`{"image":"` + img + `","datasets":[{"image":"` + img + `","target":"/..data/a..b"}]}`))
	f.Add([]byte(`{"image":"` + img + `","datasets":[{"image":"` + img + `","target":"/d\u0000"},{"image":"` + img + `","target":"/d"}]}`))
	f.Add([]byte(`{"image":"busybox\u0000:latest","policy":{}}`))
	// Claim-time fields: env, dir, labels.
	f.Add([]byte(`{"image":"` + img + `","env":["A=1","1B=2"],"dir":"rel","labels":{"a/b":"c"}}`))
	f.Add([]byte(`{"image":"` + img + `","env":["A=\u0000"],"labels":{"":"x","k":"\u0007"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Sandbox
		if json.Unmarshal(b, &s) != nil {
			return
		}
		d := s.WithDefaults()
		if s.Policy.User == (User{}) && (d.Policy.User.UID == 0 || d.Policy.User.GID == 0) {
			t.Fatalf("a zero user defaulted to %s", d.Policy.User)
		}
		if err := d.ValidateUnpinned(); err != nil && !IsCode(err, CodeInvalidArgument) {
			t.Fatalf("untyped error %v", err)
		}
		if s.Validate() == nil {
			// Defaulting and cleaning never turn a valid spec invalid.
			if err := d.Validate(); err != nil {
				t.Fatalf("valid spec invalid after WithDefaults: %v", err)
			}
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

// FuzzProcessSpec: a process spec as untrusted JSON is refused with a typed
// error or valid; a valid one is within every limit.
func FuzzProcessSpec(f *testing.F) {
	good, _ := json.Marshal(Process{Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"A=1"}, Dir: "/workspace/work", Stdout: Pipe, Stderr: Discard})
	f.Add(good)
	f.Add([]byte(`{"argv":["x"],"env":["1X=y"],"stdout":"pipe","stderr":"pipe"}`))
	f.Add([]byte(`{"argv":["x"],"env":["A-B=y","=z","NOEQ"],"stdout":"pipe","stderr":"pipe"}`))
	f.Add([]byte(`{"argv":["x\u0000"],"stdout":"pipe","stderr":"pipe"}`))
	f.Add([]byte(`{"argv":["x"],"env":["A=\u0000"],"dir":"/a\u0000","stdout":"pipe","stderr":"pipe"}`))
	f.Add([]byte(`{"argv":["x"],"dir":"rel","stdout":"tee","stderr":"pipe","timeout":-1,"output_quota":-1}`))
	big, _ := json.Marshal(Process{Argv: []string{"x", strings.Repeat("a", MaxArgBytes+1)}, Stdout: Pipe, Stderr: Pipe})
	f.Add(big)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Process
		if json.Unmarshal(b, &p) != nil {
			return
		}
		err := p.Validate()
		if err != nil {
			if !IsCode(err, CodeInvalidArgument) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		total := 0
		for _, s := range append(append([]string(nil), p.Argv...), p.Env...) {
			if strings.IndexByte(s, 0) >= 0 || len(s) > MaxArgBytes {
				t.Fatalf("valid spec holds %q", s)
			}
			total += len(s) + 1
		}
		for _, e := range p.Env {
			name, _, _ := strings.Cut(e, "=")
			if !ValidEnvName(name) {
				t.Fatalf("valid spec has env %q", e)
			}
		}
		if total > MaxArgvEnvBytes || len(p.Argv) > MaxArgs || len(p.Env) > MaxEnv {
			t.Fatalf("valid spec over the limits: %d bytes, %d args, %d env", total, len(p.Argv), len(p.Env))
		}
	})
}

func TestPoolKey(t *testing.T) {
	base := Sandbox{Image: img, Policy: DefaultPolicy(), Lifetime: Kept}
	allow := base
	allow.Policy.Network = NetworkAllowlist
	for _, tc := range []struct {
		name string
		mut  func(*Sandbox)
		same bool
	}{
		{"lifetime", func(s *Sandbox) { s.Lifetime = OneShot }, true},
		{"ttl", func(s *Sandbox) { s.TTL = time.Hour }, true},
		{"env", func(s *Sandbox) { s.Env = []string{"A=1"} }, true},
		{"dir", func(s *Sandbox) { s.Dir = "/tmp" }, true},
		{"labels", func(s *Sandbox) { s.Labels = map[string]string{"a": "b"} }, true},
		{"rules", func(s *Sandbox) {
			s.Policy.Network = NetworkAllowlist
			s.Policy.Egress = []EgressRule{{Host: "example.com"}}
		}, false},
		{"image", func(s *Sandbox) { s.Image = "sha256:" + strings.Repeat("b", 64) }, false},
		{"memory", func(s *Sandbox) { s.Policy.MemoryBytes *= 2 }, false},
		{"cpus", func(s *Sandbox) { s.Policy.CPUs = 0.5 }, false},
		{"pids", func(s *Sandbox) { s.Policy.Pids++ }, false},
		{"tmp", func(s *Sandbox) { s.Policy.TmpBytes++ }, false},
		{"network", func(s *Sandbox) { s.Policy.Network = NetworkOpen }, false},
		{"user", func(s *Sandbox) { s.Policy.User = User{UID: 1000, GID: 1000} }, false},
		{"datasets", func(s *Sandbox) { s.Datasets = []Dataset{{Image: img, Target: "/data"}} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.mut(&s)
			if got := s.PoolKey() == base.PoolKey(); got != tc.same {
				t.Fatalf("same key %v, want %v", got, tc.same)
			}
		})
	}
	// The rules of an allowlist sandbox are the claim's: not in the key.
	withRules := allow
	withRules.Policy.Egress = []EgressRule{{Host: "example.com", Port: 443}}
	if withRules.PoolKey() != allow.PoolKey() {
		t.Fatal("allowlist rules changed the pool key")
	}
}

func TestProcessDefaults(t *testing.T) {
	s := Sandbox{Env: []string{"A=1", "B=2"}, Dir: "/tmp"}
	got := s.ProcessDefaults(Process{Argv: []string{"x"}, Env: []string{"B=3", "C=4"}})
	if strings.Join(got.Env, " ") != "A=1 B=3 C=4" || got.Dir != "/tmp" {
		t.Fatalf("env %v dir %q", got.Env, got.Dir)
	}
	if got := s.ProcessDefaults(Process{Dir: "/workspace"}); got.Dir != "/workspace" {
		t.Fatalf("the process's own dir was replaced: %q", got.Dir)
	}
	if got := (Sandbox{}).ProcessDefaults(Process{Env: []string{"X=1"}}); strings.Join(got.Env, " ") != "X=1" || got.Dir != "" {
		t.Fatalf("no sandbox defaults changed the process: %+v", got)
	}
}

func TestSandboxDefaultsRefused(t *testing.T) {
	long := strings.Repeat("v", MaxLabelValueBytes+1)
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		name string
		mut  func(*Sandbox)
		want string
	}{
		{"env name", func(s *Sandbox) { s.Env = []string{"1A=x"} }, "env[0]"},
		{"env nul", func(s *Sandbox) { s.Env = []string{"A=\x00"} }, "NUL"},
		{"dir relative", func(s *Sandbox) { s.Dir = "work" }, "absolute"},
		{"label key", func(s *Sandbox) { s.Labels = map[string]string{"a b": "c"} }, "label key"},
		{"label empty key", func(s *Sandbox) { s.Labels = map[string]string{"": "c"} }, "empty"},
		{"label value", func(s *Sandbox) { s.Labels = map[string]string{"k": long} }, "over the limit"},
		{"label control", func(s *Sandbox) { s.Labels = map[string]string{"k": "a\nb"} }, "control"},
		{"labels", func(s *Sandbox) { s.Labels = many }, "over the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Sandbox{Image: img, Policy: DefaultPolicy(), Lifetime: Kept}
			tc.mut(&s)
			err := s.Validate()
			if !IsCode(err, CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want invalid_argument naming %q", err, tc.want)
			}
		})
	}
}
