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

// TestParsePoolSpec: --pool NAME=KEY=VALUE,...,size=N becomes a pool spec
// whose policy is what the same flags of sandbox create make (defaults
// field by field); every bad name, key or value is refused, named.
func TestParsePoolSpec(t *testing.T) {
	def := spec.DefaultPolicy()
	with := func(f func(*spec.Policy)) spec.Policy { p := def; f(&p); return p }
	const toolbox = "stockade/toolbox:dev"
	for _, tc := range []struct {
		in   string
		want stockade.PoolSpec
	}{
		{"py=image=stockade/python:dev,memory=512m,cpus=1,size=4",
			stockade.PoolSpec{Name: "py", Size: 4, Sandbox: spec.Sandbox{Image: "stockade/python:dev", Policy: with(func(p *spec.Policy) { p.MemoryBytes, p.CPUs = 512<<20, 1 })}}},
		{"p0=size=0", stockade.PoolSpec{Name: "p0", Sandbox: spec.Sandbox{Image: toolbox, Policy: def}}},
		{"a-b_c=size=1000,pids=9,user=1000:1001,network=open",
			stockade.PoolSpec{Name: "a-b_c", Size: 1000, Sandbox: spec.Sandbox{Image: toolbox, Policy: with(func(p *spec.Policy) {
				p.Pids, p.User, p.Network = 9, spec.User{UID: 1000, GID: 1001}, spec.NetworkOpen
			})}}},
		// An allowlist pool has no rules: the claimant brings them.
		{"net=network=allowlist,size=2", stockade.PoolSpec{Name: "net", Size: 2, Sandbox: spec.Sandbox{Image: toolbox, Policy: with(func(p *spec.Policy) { p.Network = spec.NetworkAllowlist })}}},
		{"img=image=sha256:" + strings.Repeat("0", 64) + ",size=1", stockade.PoolSpec{Name: "img", Size: 1, Sandbox: spec.Sandbox{Image: "sha256:" + strings.Repeat("0", 64), Policy: def}}},
		// memory=0 and cpus=0 are the defaults, as their flags'.
		{"z=memory=0,cpus=0,size=3", stockade.PoolSpec{Name: "z", Size: 3, Sandbox: spec.Sandbox{Image: toolbox, Policy: def}}},
	} {
		got, err := parsePoolSpec(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in, why string
	}{
		{"", "is not NAME="},
		{"py", "is not NAME="},
		{"py=", "is not NAME="},
		{"=size=1", "empty"},
		{"Py=size=1", "only a-z"},
		{"-py=size=1", "only a-z"},
		{strings.Repeat("p", 33) + "=size=1", "over 32"},
		{"py=image=x", "no size=N"},
		{"py=size=", "size \"\""},
		{"py=size=-1", "size \"-1\""},
		{"py=size=1001", "size \"1001\""},
		{"py=size=four", "size \"four\""},
		{"py=size=1,size=2", "size is given twice"},
		{"py=size=1,memory=1g,memory=2g", "memory is given twice"},
		{"py=size=1,gpus=1", "unknown key \"gpus\""},
		{"py=size=1,ttl=1h", "unknown key \"ttl\""},
		{"py=size=1,env=A=1", "unknown key \"env\""},
		{"py=size=1,label=a=b", "unknown key \"label\""},
		{"py=size=1,journal=/j", "unknown key \"journal\""},
		{"py=size=1,cpus", "\"cpus\" is not KEY=VALUE"},
		{"py=size=1,,cpus=1", "\"\" is not KEY=VALUE"},
		{"py=size=1,cpus=lots", "cpus=\"lots\""},
		{"py=size=1,cpus=-1", "cpus"},
		{"py=size=1,cpus=0.001", "cpu"},
		{"py=size=1,pids=many", "pids=\"many\""},
		{"py=size=1,memory=lots", "--memory \"lots\""},
		{"py=size=1,memory=1000", "memory"},
		{"py=size=1,user=root", "--user \"root\""},
		{"py=size=1,user=0:0", "root"},
		{"py=size=1,network=bogus", "network \"bogus\""},
		{"py=size=1,network=allow=example.com:443", "allowlist rules are the claimant's"},
		{"py=size=1,network=allow=a.com,b.com", "\"b.com\" is not KEY=VALUE"},
		{"py=size=1,image=", "image is empty"},
		{"py=size=1,image=Bad Image", "py"},
	} {
		_, err := parsePoolSpec(tc.in)
		if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: %v, want invalid_argument saying %q", tc.in, err, tc.why)
		}
	}
}

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
