package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/journal"
)

// freshUser is a new user's machine: an empty HOME and XDG directories, a
// PATH of the system's directories only (no repository bin/, no helper
// anywhere on it), no STOCKADE_* variable but the profile the daemon needs,
// and Go's caches where they are (the machine may have no network).
type freshUser struct {
	dir string
	env []string
}

func newFreshUser(t *testing.T) *freshUser {
	t.Helper()
	u := &freshUser{dir: t.TempDir()}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "STOCKADE_PROFILE", "DOCKER_HOST", "DOCKER_CONFIG", "GOCACHE", "GOMODCACHE", "GOPATH", "TMPDIR":
			u.env = append(u.env, kv)
		}
	}
	path := []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
	if p, err := exec.LookPath("go"); err == nil {
		path = append([]string{filepath.Dir(p)}, path...)
	}
	// Nothing of ours is on that PATH: what runs can only come from the
	// one binary.
	for _, d := range path {
		for _, name := range []string{"stockade", "stockade-warden", "stockade-egress"} {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				t.Fatalf("%s is on the fresh user's PATH (in %s): the test could not show the binary stands alone", name, d)
			}
		}
	}
	u.env = append(u.env, "PATH="+strings.Join(path, ":"), "GOTELEMETRY=off", "GOTOOLCHAIN=local")
	for k, sub := range map[string]string{"HOME": "home", "XDG_STATE_HOME": "state", "XDG_RUNTIME_DIR": "run", "XDG_CONFIG_HOME": "config", "XDG_CACHE_HOME": "cache"} {
		p := filepath.Join(u.dir, sub)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		u.env = append(u.env, k+"="+p)
	}
	return u
}

// journal is where the user's runtime keeps its journal: the default path.
func (u *freshUser) journal() string { return filepath.Join(u.dir, "state", "stockade", "journal.db") }

// command runs name in dir as the user, with extra variables.
func (u *freshUser) command(ctx context.Context, dir, name string, args []string, extra ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, append(append([]string{}, u.env...), extra...)
	return cmd
}

// leftOnDaemon removes, when the test ends, whatever the owner of the user's
// journal left on the daemon; the function it returns fails the test if
// anything was left once the run is over.
func (u *freshUser) leftOnDaemon(t *testing.T) func() {
	cli := dockertest.Client(t)
	var owner string
	t.Cleanup(func() {
		if owner == "" {
			if j, err := journal.Open(u.journal(), journal.Options{ReadOnly: true}); err == nil {
				owner = j.Owner()
				_ = j.Close() // only read
			}
		}
		if owner != "" {
			if err := dockertest.RemoveOwned(context.Background(), cli, owner); err != nil {
				t.Errorf("cleanup of %s: %v", owner, err)
			}
		}
	})
	return func() {
		t.Helper()
		j, err := journal.Open(u.journal(), journal.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("the run left no journal at the default path: %v", err)
		}
		owner = j.Owner()
		_ = j.Close() // only read
		if n, err := dockertest.Owned(context.Background(), cli, owner); err != nil || n != 0 {
			t.Errorf("%d containers, networks or volumes of owner %s left on the daemon (%v)", n, owner, err)
		}
	}
}

// installedHelpers checks the embedded warden was written under the user's
// state directory, content-addressed, and that it is the only copy on disk.
func (u *freshUser) installedHelpers(t *testing.T) {
	t.Helper()
	got, _ := filepath.Glob(filepath.Join(u.dir, "state", "stockade", "helpers", "sha256-*", "stockade-warden"))
	if len(got) != 1 {
		t.Errorf("installed wardens under the state directory: %v, want one", got)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestInstallGoInstall: `go install ./cmd/stockade` into an empty GOBIN
// gives a stockade that runs `stockade run -- echo ok` on a fresh HOME
// with nothing else installed: the warden comes from the binary itself.
func TestInstallGoInstall(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	u := newFreshUser(t)
	check := u.leftOnDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gobin := filepath.Join(u.dir, "gobin")
	if err := os.Mkdir(gobin, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := u.command(ctx, moduleRoot(t), "go", []string{"install", "./cmd/stockade"}, "GOBIN="+gobin, "GOFLAGS=").CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/stockade: %v\n%s", err, out)
	}
	ents, _ := os.ReadDir(gobin)
	if len(ents) != 1 || ents[0].Name() != "stockade" {
		t.Fatalf("GOBIN holds %v, want stockade alone", ents)
	}
	printsOK(t, "stockade run -- echo ok", u.command(ctx, u.dir, filepath.Join(gobin, "stockade"), []string{"run", "--", "echo", "ok"}))
	u.installedHelpers(t)
	check()
	// doctor says where the warden came from: the embedded copy, now
	// installed under the state directory.
	out, err := u.command(ctx, u.dir, filepath.Join(gobin, "stockade"), []string{"doctor"}).CombinedOutput()
	if want := "installed at " + filepath.Join(u.dir, "state", "stockade", "helpers", "sha256-"); err != nil || !strings.Contains(string(out), "warden    embedded (stockade-warden/") || !strings.Contains(string(out), want) {
		t.Errorf("stockade doctor: %v, does not say the warden is embedded and %q:\n%s", err, want, out)
	}
}

// embedProgram is a Go host that imports the module and runs a process: no
// helper binary is built or named.
const embedProgram = `package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
)

func main() {
	ctx := context.Background()
	rt, err := stockade.Open(ctx, stockade.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer rt.Close()
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: "stockade/toolbox:dev", Lifetime: spec.OneShot})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer sb.Remove(ctx)
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"echo", "ok"}, Stderr: spec.Discard})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	io.Copy(os.Stdout, p.Stdout())
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		fmt.Fprintln(os.Stderr, res, err)
		os.Exit(1)
	}
}
`

// TestInstallEmbedded: a program in a module of its own that requires
// github.com/stockade/stockade (replaced by this checkout; go.sum copied,
// no network) builds and runs a process with no helper binary on disk.
func TestInstallEmbedded(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	u := newFreshUser(t)
	check := u.leftOnDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := moduleRoot(t)
	mod := filepath.Join(u.dir, "host")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	// What `go get github.com/stockade/stockade` writes: the module, and
	// its requirements as indirect ones (so the pruned module graph needs
	// no go.mod outside the cache).
	ours, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	_, reqs, ok := strings.Cut(string(ours), "\nrequire")
	if !ok {
		t.Fatal("go.mod has no require")
	}
	gomod := "module example.com/host\n\ngo 1.26.0\n\nrequire github.com/stockade/stockade v0.0.0\n\nrequire" + reqs + "\nreplace github.com/stockade/stockade => " + root + "\n"
	for name, body := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": embedProgram} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(u.dir, "host-bin")
	if out, err := u.command(ctx, mod, "go", []string{"build", "-o", bin, "."}, "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off").CombinedOutput(); err != nil {
		t.Fatalf("building the host program: %v\n%s", err, out)
	}
	printsOK(t, "the host program", u.command(ctx, u.dir, bin, nil))
	u.installedHelpers(t)
	check()
}

// printsOK runs cmd and fails the test unless it exits 0 having printed
// exactly "ok".
func printsOK(t *testing.T, what string, cmd *exec.Cmd) {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("%s: %v, stdout %q, stderr %q", what, err, out, stderr.String())
	}
}
