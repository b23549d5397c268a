package stockade_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// TestFakeSecretsNeverWrittenDown: a secret variable reaches every process
// of its sandbox (a pooled one's too, given at the claim) while its value
// is in no journal record, export, state, history or recording, nor in the
// journal's file; a runtime opened after it was given refuses the
// sandbox's processes, naming the variable and its ref, until SetSecrets
// gives it again.
func TestFakeSecretsNeverWrittenDown(t *testing.T) {
	const value, again = "s3cret-never-written-9d2c", "s3cret-given-again-41f0"
	f := testutil.NewFake(t)
	var mu sync.Mutex
	var envs [][]string
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		mu.Lock()
		envs = append(envs, slices.Clone(req.Spec.Env))
		mu.Unlock()
		return dockerio.FakeRun{}
	}
	lastEnv := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return envs[len(envs)-1]
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	ctx := context.Background()
	secret := spec.SecretVar{Name: "TOKEN", Ref: "secret ns/creds key token", Value: value}
	rt1 := testutil.OpenFake(t, f, path, func(o *stockade.Options) {
		o.Pools = []stockade.PoolSpec{{Name: "p", Sandbox: spec.Sandbox{Image: fakeImage}, Size: 1}}
	})
	testutil.Eventually(t, "the pool ready", func() bool {
		ps, err := rt1.Pools(ctx)
		return err == nil && len(ps) == 1 && ps[0].Ready == 1
	})
	claimed := mustCreate(t, rt1, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept, Secrets: []spec.SecretVar{secret}})
	cold := mustCreate(t, rt1, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept, Env: []string{"MODE=fast"}, Secrets: []spec.SecretVar{secret},
		Policy: spec.Policy{Pids: 77}}) // another key: a create
	for _, sb := range []*stockade.Sandbox{claimed, cold} {
		p := mustStart(t, sb, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard, Env: []string{"OWN=1"}})
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if env := lastEnv(); !slices.Contains(env, "TOKEN="+value) || !slices.Contains(env, "OWN=1") {
			t.Fatalf("sandbox %s's process env %q lacks the secret or its own", sb.ID(), env)
		}
		st, err := sb.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Spec.Secrets) != 1 || st.Spec.Secrets[0] != (spec.SecretVar{Name: secret.Name, Ref: secret.Ref}) {
			t.Fatalf("sandbox %s's state shows secrets %+v, want the name and ref only", sb.ID(), st.Spec.Secrets)
		}
		hist, err := rt1.History(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hist {
			if strings.Contains(string(e.Payload), value) {
				t.Fatalf("history event %s holds the value: %s", e.Type, e.Payload)
			}
		}
	}
	if ps, err := rt1.Pools(ctx); err != nil || ps[0].Warm == 0 {
		t.Fatalf("the first sandbox was not claimed from the pool: %+v %v", ps, err)
	}
	var export bytes.Buffer
	if err := rt1.Export(ctx, &export); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(export.String(), value) || !strings.Contains(export.String(), secret.Ref) {
		t.Fatal("the export holds the value, or not the ref")
	}
	if err := rt1.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing on disk: the journal's file and the recordings beside it.
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Close() }()
	if err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root.FS(), p)
		if err == nil && bytes.Contains(b, []byte(value)) {
			t.Errorf("%s holds the secret's value", p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	rt2 := testutil.OpenFake(t, f, path)
	sb, err := rt2.Sandbox(ctx, cold.ID())
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb.Start(ctx, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if !spec.IsCode(err, spec.CodeConflict) || !strings.Contains(err.Error(), "TOKEN (secret ns/creds key token)") || !strings.Contains(err.Error(), "SetSecrets") {
		t.Fatalf("a process of a re-adopted sandbox without its secret: %v, want conflict naming it and SetSecrets", err)
	}
	for _, bad := range [][]spec.SecretVar{
		nil,
		{{Name: "OTHER", Value: "x"}},
		{{Name: "TOKEN", Ref: "secret ns/other key token", Value: "x"}},
		{{Name: "TOKEN", Value: "x"}, {Name: "TOKEN", Value: "y"}},
		{{Name: "TOKEN", Value: "x"}, {Name: "MORE", Value: "y"}},
	} {
		if err := sb.SetSecrets(ctx, bad); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("SetSecrets(%+v): %v, want invalid_argument", bad, err)
		}
	}
	if err := sb.SetSecrets(ctx, []spec.SecretVar{{Name: "TOKEN", Value: again}}); err != nil {
		t.Fatal(err)
	}
	p := mustStart(t, sb, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if env := lastEnv(); !slices.Contains(env, "TOKEN="+again) || !slices.Contains(env, "MODE=fast") {
		t.Fatalf("after SetSecrets the process env is %q", env)
	}
}
