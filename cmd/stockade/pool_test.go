package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestParseServePools: serve's --pool is repeatable, its names distinct;
// --pool-refills is at least 1, 2 by default.
func TestParseServePools(t *testing.T) {
	cmd, err := parse([]string{"serve", "--pool", "a=size=1", "--pool", "b=memory=256m,size=2", "--pool-refills", "3"})
	if err != nil {
		t.Fatal(err)
	}
	c := cmd.(*serveCmd)
	if len(c.pools) != 2 || c.pools[0].Name != "a" || c.pools[1].Name != "b" || c.pools[1].Sandbox.Policy.MemoryBytes != 256<<20 || c.refills != 3 {
		t.Fatalf("pools %+v refills %d", c.pools, c.refills)
	}
	cmd, err = parse([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if c := cmd.(*serveCmd); len(c.pools) != 0 || c.refills != stockade.DefaultPoolRefills {
		t.Fatalf("no --pool: pools %+v refills %d", c.pools, c.refills)
	}
	for _, args := range [][]string{
		{"serve", "--pool", "a=size=1", "--pool", "a=size=2"},
		{"serve", "--pool-refills", "0"},
		{"serve", "--pool-refills", "-1"},
		{"serve", "--pool-refills", "x"},
		{"serve", "--pool", "a=size=1,bogus=1"},
		{"serve", "--pool"},
	} {
		if _, err := parse(args); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("%q: %v, want invalid_argument", args, err)
		}
	}
}

// TestParseSandboxDefaults: sandbox create's --env, --dir and --label, ls
// --all, run's --label, and pool's subcommands.
func TestParseSandboxDefaults(t *testing.T) {
	def := spec.DefaultPolicy()
	const image = "stockade/toolbox:dev"
	for _, tc := range []struct {
		args []string
		want command
	}{
		{[]string{"sandbox", "create", "--env", "A=1", "--env", "B=", "--dir", "/srv", "--label", "team=x", "--label", "io.example/job=7=8"},
			&sandboxCmd{sub: "create", image: image, policy: def, env: []string{"A=1", "B="}, dir: "/srv", labels: labelFlag{"team": "x", "io.example/job": "7=8"}}},
		{[]string{"sandbox", "create", "--label", "empty="}, &sandboxCmd{sub: "create", image: image, policy: def, labels: labelFlag{"empty": ""}}},
		{[]string{"sandbox", "ls", "--all"}, &sandboxCmd{sub: "ls", all: true}},
		{[]string{"--json", "sandbox", "ls", "--all"}, &sandboxCmd{g: global{json: true}, sub: "ls", all: true}},
		{[]string{"run", "--label", "k=v", "--", "true"}, &runCmd{image: image, policy: def, labels: labelFlag{"k": "v"}, proc: spec.Process{Argv: []string{"true"}, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		{[]string{"pool", "ls"}, &poolCmd{sub: "ls"}},
		{[]string{"pool", "ls", "--json"}, &poolCmd{g: global{json: true}, sub: "ls"}},
		{[]string{"pool", "resize", "py", "8"}, &poolCmd{sub: "resize", name: "py", size: 8}},
		{[]string{"pool", "resize", "py", "0"}, &poolCmd{sub: "resize", name: "py"}},
	} {
		got, err := parse(tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.args, got, tc.want)
		}
	}
}

// TestPrintSandboxesPoolColumn: the table has a POOL column
// ("-" for a sandbox made cold), --json carries pool and labels.
func TestPrintSandboxesPoolColumn(t *testing.T) {
	list := []host.SandboxInfo{
		{ID: "sb1", Phase: lifecycle.PhasePooled, Lifetime: spec.Kept, Pool: "py"},
		{ID: "sb2", Phase: lifecycle.PhaseStarted, Lifetime: spec.Kept, Labels: map[string]string{"team": "x"}},
	}
	var b bytes.Buffer
	printSandboxes(&printer{w: &b}, list, false)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "POOL") || !strings.Contains(lines[1], "pooled") || !strings.Contains(lines[1], " py ") || !strings.Contains(lines[2], " - ") {
		t.Fatalf("table:\n%s", b.String())
	}
	b.Reset()
	printSandboxes(&printer{w: &b}, list, true)
	if !strings.Contains(b.String(), `"pool":"py"`) || !strings.Contains(b.String(), `"labels":{"team":"x"}`) {
		t.Fatalf("json:\n%s", b.String())
	}
}

// TestPrintPools: the LAST ERROR column appears when a pool has one, its
// text escaped for the terminal.
func TestPrintPools(t *testing.T) {
	ok := host.PoolInfo{Name: "py", Image: "sha256:" + strings.Repeat("a", 64), Size: 4, Ready: 3, Filling: 1, Warm: 7, Cold: 2}
	var b bytes.Buffer
	printPools(&printer{w: &b}, []host.PoolInfo{ok}, false)
	if want := "NAME  SIZE  READY  FILLING  WARM  COLD  FAILURES  IMAGE\npy    4     3      1        7     2     0         sha256:aaaaaaaaaaa…\n"; b.String() != want {
		t.Fatalf("table:\n%q\nwant\n%q", b.String(), want)
	}
	bad := host.PoolInfo{Name: "x", Image: "i", Size: 1, Failures: 3, LastError: "engine: no such image\x1b[31m"}
	b.Reset()
	printPools(&printer{w: &b}, []host.PoolInfo{ok, bad}, false)
	if !strings.Contains(b.String(), "LAST ERROR") || strings.Contains(b.String(), "\x1b") || !strings.Contains(b.String(), `"engine: no such image\x1b[31m"`) {
		t.Fatalf("table with an error:\n%s", b.String())
	}
	b.Reset()
	printPools(&printer{w: &b}, []host.PoolInfo{ok, bad}, true)
	if n := strings.Count(b.String(), "\n"); n != 2 || !strings.Contains(b.String(), `"last_error":"engine: no such image\u001b[31m"`) {
		t.Fatalf("json:\n%s", b.String())
	}
}

// TestPoolNeedsServer: pool ls and resize without a server fail with one
// line (exit 1), opening no journal.
func TestPoolNeedsServer(t *testing.T) {
	t.Setenv("STOCKADE_JOURNAL", t.TempDir()+"/j.db")
	for _, args := range [][]string{{"pool", "ls"}, {"pool", "resize", "py", "1"}} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), args, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "stockade serve") || out.Len() > 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
}
