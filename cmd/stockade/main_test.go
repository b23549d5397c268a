package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/warden/link"
)

// TestMain keeps every test here, and every child a drill starts, away from
// the user's real journal: HOME, the XDG directories and STOCKADE_JOURNAL
// point at a fresh temporary directory.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestParse: a command line becomes a validated request, global flags
// before or after the command, policy flags left at zero taking the
// defaults field by field.
func TestParse(t *testing.T) {
	def := spec.DefaultPolicy()
	with := func(f func(*spec.Policy)) spec.Policy { p := def; f(&p); return p }
	proc := func(argv ...string) spec.Process {
		return spec.Process{Argv: argv, Stdout: spec.Pipe, Stderr: spec.Pipe}
	}
	const image = "stockade/toolbox:dev"
	for _, tc := range []struct {
		args []string
		want command
	}{
		{[]string{"doctor"}, &doctorCmd{}},
		{[]string{"--profile", "linux-x64", "doctor"}, &doctorCmd{g: global{profile: "linux-x64"}}},
		{[]string{"doctor", "--profile", "linux-x64"}, &doctorCmd{g: global{profile: "linux-x64"}}},
		{[]string{"--journal", "/j", "journal", "ls"}, &journalCmd{g: global{journal: "/j"}, sub: "ls"}},
		{[]string{"journal", "--journal", "/j", "ls"}, &journalCmd{g: global{journal: "/j"}, sub: "ls"}},
		{[]string{"journal", "ls", "--journal=/j"}, &journalCmd{g: global{journal: "/j"}, sub: "ls"}},
		// The later of two --journal flags wins, as with any repeated flag.
		{[]string{"--json", "--journal", "/a", "journal", "show", "sb1", "--journal", "/b"}, &journalCmd{g: global{journal: "/b", json: true}, sub: "show", id: "sb1"}},
		{[]string{"journal", "replay", "p1", "--process", "--at", "4"}, &journalCmd{sub: "replay", id: "p1", process: true, at: seqList{4}}},
		{[]string{"journal", "replay", "--at=4", "--", "-odd-id"}, &journalCmd{sub: "replay", id: "-odd-id", at: seqList{4}}},
		{[]string{"journal", "diff", "sb1", "--at", "1", "--at", "3"}, &journalCmd{sub: "diff", id: "sb1", at: seqList{1, 3}}},
		{[]string{"sandbox", "create", "--memory", "256m"}, &sandboxCmd{sub: "create", image: "stockade/toolbox:dev", policy: func() spec.Policy { p := spec.DefaultPolicy(); p.MemoryBytes = 256 << 20; return p }()}},
		{[]string{"sandbox", "rm", "-f", "sb1"}, &sandboxCmd{sub: "rm", id: "sb1", force: true}},
		{[]string{"exec", "-i", "-e", "A=1", "sb1", "--", "sh", "-c", "x"}, &execCmd{id: "sb1", proc: spec.Process{Argv: []string{"sh", "-c", "x"}, Env: []string{"A=1"}, Stdin: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		// -t: a terminal; -it and -ti are -i -t, as in docker.
		{[]string{"exec", "-t", "sb1", "--", "sh"}, &execCmd{id: "sb1", proc: spec.Process{Argv: []string{"sh"}, TTY: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		{[]string{"exec", "-it", "sb1", "--", "sh"}, &execCmd{id: "sb1", proc: spec.Process{Argv: []string{"sh"}, TTY: true, Stdin: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		// A flag's value is not a cluster, whatever it looks like.
		{[]string{"exec", "--journal", "-it", "--tty", "-i", "sb1", "--", "sh", "-it"}, &execCmd{g: global{journal: "-it"}, id: "sb1", proc: spec.Process{Argv: []string{"sh", "-it"}, TTY: true, Stdin: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		{[]string{"exec", "-d", "sb1", "--", "sleep", "9"}, &execCmd{id: "sb1", detach: true, proc: proc("sleep", "9")}},
		{[]string{"run", "-ti", "--", "sh"}, &runCmd{image: image, policy: def, proc: spec.Process{Argv: []string{"sh"}, TTY: true, Stdin: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		{[]string{"run", "--tty", "--timeout", "3s", "--", "top"}, &runCmd{image: image, policy: def, proc: spec.Process{Argv: []string{"top"}, TTY: true, Timeout: 3 * time.Second, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		// A cluster after the command is the command's.
		{[]string{"run", "-t", "ls", "-it"}, &runCmd{image: image, policy: def, proc: spec.Process{Argv: []string{"ls", "-it"}, TTY: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		{[]string{"cp", "./a:b", "sb1:work/x"}, &cpCmd{in: true, id: "sb1", remote: "work/x", local: "./a:b"}},
		{[]string{"cp", "sb1:work/x", "out"}, &cpCmd{id: "sb1", remote: "work/x", local: "out"}},
		{[]string{"recover", "--dry-run", "--json"}, &recoverCmd{g: global{json: true}, dry: true}},
		{[]string{"--journal", "/j", "recover", "--stop-processes"}, &recoverCmd{g: global{journal: "/j"}, stopProcs: true}},
		{[]string{"run", "--", "sh", "-c", "echo --json"}, &runCmd{image: image, policy: def, proc: proc("sh", "-c", "echo --json")}},
		// Flags stop at the command: its own flags are its own.
		{[]string{"--json", "run", "ls", "--journal", "x"}, &runCmd{g: global{json: true}, image: image, policy: def, proc: proc("ls", "--journal", "x")}},
		{[]string{"run", "--cpus", "0.5", "--memory", "0", "--pids", "0", "-e", "A=1", "-e", "B=", "--workdir", "/tmp", "--timeout", "3s", "-i", "true"},
			&runCmd{image: image, policy: with(func(p *spec.Policy) { p.CPUs = 0.5 }),
				proc: spec.Process{Argv: []string{"true"}, Env: []string{"A=1", "B="}, Dir: "/tmp", Timeout: 3 * time.Second, Stdin: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}},
		{[]string{"--journal", "/j", "run", "--memory", "1g", "--pids", "9", "--network", "bridge", "--user", "1000:1001", "--image", "img", "--history", "true"},
			&runCmd{g: global{journal: "/j"}, image: "img", history: true, proc: proc("true"), policy: with(func(p *spec.Policy) {
				p.MemoryBytes, p.Pids, p.Network, p.User = 1<<30, 9, spec.NetworkOpen, spec.User{UID: 1000, GID: 1001}
			})}},
		{[]string{"drill", "--failpoints", "sandbox.reserved, process.reserved", "--seed", "7", "--random", "2"},
			&drillCmd{points: []string{"sandbox.reserved", "process.reserved"}, random: 2, seed: 7, image: image}},
		{[]string{"drill", "--failpoints", "", "--seed", "1", "--dir", "/d"}, &drillCmd{seed: 1, image: image, dir: "/d"}},
		{[]string{"drill-child", "--journal", "/j", "--image", "i", "--recover-only"}, &drillChildCmd{g: global{journal: "/j"}, image: "i", recoverOnly: true}},
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

// usageErrors are command lines that must exit 2 whatever the machine holds.
var usageErrors = [][]string{
	{"journal", "diff", "sb1", "--at", "1"}, {"journal", "replay", "sb1", "--at", "1", "--at", "2"}, {"journal", "diff", "sb1", "--at", "x", "--at", "2"},
	{"sandbox"}, {"sandbox", "nope"}, {"sandbox", "inspect"}, {"sandbox", "create", "--memory", "lots"}, {"sandbox", "create", "--ttl", "-1s"}, {"sandbox", "ls", "extra"},
	{"serve", "--retain", "-1s"}, {"serve", "extra"}, {"journal", "show", "sb1", "--follow", "--output"},
	{"serve", "--metrics", "9464"}, {"serve", "--metrics", "localhost:http"}, {"serve", "--metrics", ":70000"},
	{"serve", "--mcp", "0.0.0.0:8080"}, {"serve", "--mcp", "[::]:8080"}, {"serve", "--mcp-token", "/tmp/t"}, {"serve", "--mcp", "9000"}, {"mcp", "extra"},
	{"exec"}, {"exec", "-i", "-d", "sb1", "--", "cat"},
	{"exec", "-t", "-d", "sb1", "--", "sh"}, {"exec", "-dt", "sb1", "--", "sh"}, {"exec", "-itd", "sb1", "--", "sh"}, {"exec", "-tx", "sb1", "--", "sh"},
	{"run", "-td", "--", "sh"}, {"run", "-t=maybe", "--", "sh"}, {"exec", "sb1"}, {"exec", "sb1", "--"}, {"exec", "-e", "1X=2", "sb1", "--", "true"},
	{"cp", "a", "b"}, {"cp", "s1:a", "s2:b"}, {"cp", "sb1:../etc", "x"}, {"cp", "sb1:", "x"}, {"cp", "a"},
	{}, {"frobnicate"}, {"--json", "frobnicate"}, {"--bogus", "journal", "ls"}, {"--journal"},
	{"run"}, {"run", "--"}, {"run", "--memory", "lots", "--", "true"}, {"run", "--memory", "-1m", "--", "true"},
	{"run", "--user", "root", "--", "true"}, {"run", "--user", "0:0", "--", "true"},
	{"run", "--network", "bogus", "--", "true"}, {"run", "--cpus", "-1", "--", "true"}, {"run", "--cpus", "NaN", "--", "true"},
	{"run", "--pids", "-5", "--", "true"}, {"run", "--pids", "many", "--", "true"},
	// Well formed, but more exact than Docker can honour (profile.AdmitPolicy).
	{"run", "--memory", "1000", "--", "true"}, {"run", "--cpus", "0.001", "--", "true"}, {"run", "--memory", "10000001", "--", "true"},
	{"run", "--cpus", "2000", "--", "true"}, {"sandbox", "create", "--memory", "1000"},
	{"run", "--profile", "nope", "--", "true"}, {"--profile", "nope", "journal", "ls"}, {"doctor", "--profile", "nope"},
	{"run", "-e", "NOEQUALS", "--", "true"}, {"run", "-e", "=v", "--", "true"}, {"run", "--workdir", "rel", "--", "true"},
	{"run", "--timeout", "-1s", "--", "true"}, {"run", "--timeout", "soon", "--", "true"}, {"run", "--image", "", "--", "true"},
	{"journal"}, {"journal", "nope"}, {"journal", "--json"}, {"journal", "show"}, {"journal", "show", "a", "b"},
	{"journal", "show", ""}, {"journal", "ls", "extra"}, {"journal", "export", "--at", "3"}, {"journal", "show", "sb1", "--at", "3"},
	{"journal", "replay"}, {"journal", "replay", "sb1", "--at", "abc"}, {"journal", "replay", "sb1", "--at", "-1"},
	{"logs"}, {"logs", "a", "b"}, {"logs", ""}, {"logs", "--stdout", "--stderr", "p1"}, {"logs", "--at", "3", "p1"},
	{"journal", "ls", "--output"}, {"journal", "show", "--output=maybe", "sb1"},
	{"doctor", "extra"}, {"recover", "now"}, {"recover", "--dry-run=maybe"},
	{"drill", "--failpoints", "nope"}, {"drill", "--random", "-1"}, {"drill", "extra"}, {"drill-child", "x"},
	// Warm pools and the sandbox's defaults.
	{"serve", "--pool", "py=size=1,gpus=1"}, {"serve", "--pool", "py=memory=lots,size=1"}, {"serve", "--pool", "py=image=x"},
	{"serve", "--pool", "Py=size=1"}, {"serve", "--pool", "a=size=1", "--pool", "a=size=1"}, {"serve", "--pool-refills", "0"},
	{"pool"}, {"pool", "nope"}, {"pool", "ls", "extra"}, {"pool", "resize", "py"}, {"pool", "resize", "py", "-1"},
	{"pool", "resize", "py", "1001"}, {"pool", "resize", "Py", "1"}, {"pool", "resize", "py", "1", "2"},
	{"sandbox", "create", "--env", "NOEQUALS"}, {"sandbox", "create", "--env", "=v"}, {"sandbox", "create", "--dir", "rel"},
	{"sandbox", "create", "--label", "novalue"}, {"sandbox", "create", "--label", "=v"}, {"sandbox", "create", "--label", "bad key=v"},
	{"sandbox", "create", "--label", "k=1", "--label", "k=2"}, {"sandbox", "create", "--label", "k=a\x01b"},
	{"sandbox", "ls", "--all=maybe"}, {"sandbox", "inspect", "--all", "sb1"}, {"run", "--label", "x", "--", "true"}, {"run", "--env", "A=1", "--", "true"},
	// Checkpoints.
	{"checkpoint"}, {"checkpoint", "sb1", "n", "extra"}, {"checkpoint", "ls", "sb1", "extra"}, {"checkpoint", "rm"},
	{"checkpoint", "rm", "notanid"}, {"checkpoint", "rm", "ck-0123456789abcdef0123", "x"}, {"rollback"}, {"rollback", "sb1"},
	{"rollback", "sb1", "ck", "x"}, {"sandbox", "create", "--from", "nope"},
}

// TestUsage: a usage error exits 2 with a message naming what was wrong,
// before anything opens a journal or talks to Docker — whether the default
// journal is missing, exists, is held by a runtime, or cannot even be
// located. The daemon is unreachable throughout.
func TestUsage(t *testing.T) {
	for _, state := range []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"no default journal", func(*testing.T, string) {}},
		{"default journal exists", func(t *testing.T, path string) { makeJournal(t, path) }},
		{"default journal held by a runtime", func(t *testing.T, path string) {
			makeJournal(t, path)
			j, err := journal.Open(path, journal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = j.Close() }) // teardown
		}},
		{"no home at all", func(t *testing.T, _ string) {
			t.Setenv("STOCKADE_JOURNAL", "")
			t.Setenv("XDG_STATE_HOME", "")
			t.Setenv("HOME", "")
			if p, err := statedir.DefaultJournal(); err == nil {
				t.Fatalf("a default journal path without a home: %s", p)
			}
		}},
	} {
		t.Run(state.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state", "stockade", "journal.db")
			t.Setenv("STOCKADE_JOURNAL", path)
			t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "no-daemon.sock"))
			state.setup(t, path)
			_, statErr := os.Stat(path)
			check := func(args []string) {
				var out, errb bytes.Buffer
				if code := dispatch(context.Background(), args, nil, &out, &errb); code != 2 {
					t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errb.String())
				}
				if !strings.Contains(errb.String(), "invalid_argument") || out.Len() > 0 {
					t.Errorf("%q: stdout %q, stderr %q: want only an invalid_argument message", args, out.String(), errb.String())
				}
			}
			for _, args := range usageErrors {
				check(args)
			}
			// A bad profile from the environment is bad input too.
			t.Setenv("STOCKADE_PROFILE", "nope")
			check([]string{"run", "--", "true"})
			check([]string{"journal", "ls"})
			if _, err := os.Stat(path); os.IsNotExist(err) != os.IsNotExist(statErr) {
				t.Errorf("the default journal's existence changed: %v, was %v", err, statErr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"--journal", "x", "help"}, {"run", "-h"}, {"journal", "-h"}, {"journal", "ls", "--help"}} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), args, nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "usage: stockade") || errb.Len() > 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
}

// makeJournal makes a journal at path holding one kept sandbox (sb1) with a
// process (p1).
func makeJournal(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // teardown
	add := func(k journal.Key, parent string, ev lifecycle.Event) {
		typ, payload, _ := lifecycle.Encode(ev)
		if _, err := j.Append(context.Background(), journal.Record{Key: k, Parent: parent, Type: typ, Payload: payload, Terminal: lifecycle.Terminal(ev)}); err != nil {
			t.Fatal(err)
		}
	}
	sb := journal.Key{Kind: journal.KindSandbox, ID: "sb1"}
	pr := journal.Key{Kind: journal.KindProcess, ID: "p1"}
	add(sb, "", lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Lifetime: spec.Kept}})
	add(sb, "", lifecycle.SandboxCreated{Workload: "w"})
	add(sb, "", lifecycle.SandboxStarted{})
	add(pr, "sb1", lifecycle.ProcessReserved{Sandbox: "sb1", Spec: spec.Process{Argv: []string{"true"}}})
}

// TestJournalCommands runs the read-only journal commands on a journal made
// here: show, replay --at, verify, export, ls; the journal named by --journal
// after the command or before it, or by STOCKADE_JOURNAL.
func TestJournalCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	makeJournal(t, path)
	for _, how := range []struct {
		name string
		args func([]string) []string
	}{
		{"--journal after", func(a []string) []string { return append(a, "--journal", path) }},
		{"--journal before", func(a []string) []string { return append([]string{"--journal", path}, a...) }},
		{"STOCKADE_JOURNAL", func(a []string) []string { return a }},
	} {
		t.Run(how.name, func(t *testing.T) {
			env := path
			if how.name != "STOCKADE_JOURNAL" {
				env = filepath.Join(t.TempDir(), "absent.db")
			}
			t.Setenv("STOCKADE_JOURNAL", env)
			run := func(args ...string) (int, string, string) {
				var out, errb bytes.Buffer
				code := dispatch(context.Background(), how.args(args), nil, &out, &errb)
				return code, out.String(), errb.String()
			}
			if code, out, e := run("journal", "show", "sb1"); code != 0 || !strings.Contains(out, "sandbox.started") || !strings.Contains(out, "process.reserved") {
				t.Fatalf("show: %d %q %q", code, out, e)
			}
			if code, out, e := run("journal", "replay", "sb1", "--at", "2"); code != 0 || !strings.Contains(out, `"Phase": "reserved"`) || !strings.Contains(out, `"workload": "w"`) || !strings.Contains(out, `"ID": "sb1"`) {
				t.Fatalf("replay --at 2: %d %q %q", code, out, e)
			}
			if code, out, e := run("journal", "replay", "p1", "--process"); code != 0 || !strings.Contains(out, `"ID": "p1"`) {
				t.Fatalf("replay --process: %d %q %q", code, out, e)
			}
			if code, out, e := run("journal", "verify"); code != 0 || !strings.Contains(out, "every record decodes") {
				t.Fatalf("verify: %d %q %q", code, out, e)
			}
			if code, out, _ := run("journal", "export"); code != 0 || strings.Count(out, "\n") != 4 {
				t.Fatalf("export: %d %q", code, out)
			}
			if code, out, _ := run("journal", "ls"); code != 0 || !strings.Contains(out, "sb1") || !strings.Contains(out, "p1") {
				t.Fatalf("ls: %d %q", code, out)
			}
			if code, out, _ := run("--json", "journal", "ls"); code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"parent":"sb1"`) {
				t.Fatalf("ls --json: %d %q", code, out)
			}
			if code, out, _ := run("--json", "journal", "show", "sb1"); code != 0 || strings.Count(out, "{\"kind\":") != 4 {
				t.Fatalf("--json show: %d %q", code, out)
			}
			if code, _, e := run("journal", "show", "nosuch"); code != 1 || !strings.Contains(e, "not_found") {
				t.Fatalf("show of an unknown sandbox: %d %q", code, e)
			}
			if _, err := os.Stat(env); env != path && !os.IsNotExist(err) {
				t.Errorf("the default journal %s was made: %v", env, err)
			}
		})
	}
}

// TestJournalRestore: a copy of a journal refuses to be a runtime's journal;
// `journal restore` makes a writable journal of it, deliberately, as a new
// file, and refuses to overwrite one.
func TestJournalRestore(t *testing.T) {
	dir := t.TempDir()
	path, cp, dst := filepath.Join(dir, "j.db"), filepath.Join(dir, "copy.db"), filepath.Join(dir, "restored.db")
	makeJournal(t, path)
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.CopyFile(cp); err != nil {
		t.Fatal(err)
	}
	owner := j.Owner()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Open(cp, journal.Options{}); !errors.Is(err, journal.ErrCopy) || !strings.Contains(err.Error(), "stockade journal restore") {
		t.Fatalf("writable open of a copy: %v", err)
	}
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := dispatch(context.Background(), args, nil, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run("journal", "restore", cp); code != 2 {
		t.Fatalf("restore without DEST: %d %q", code, out)
	}
	if code, out := run("journal", "restore", cp, dst); code != 0 {
		t.Fatalf("restore: %d %q", code, out)
	}
	r, err := journal.Open(dst, journal.Options{Owner: owner})
	if err != nil {
		t.Fatalf("the restored journal does not open writable: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if code, out := run("journal", "restore", cp, dst); code != 1 || !strings.Contains(out, "exists") {
		t.Fatalf("restore over an existing file: %d %q", code, out)
	}
}

// commands is every command name parseCommand accepts, but drill-child
// (the drill's own workload, not for people): each has its help.
var commands = []string{"doctor", "run", "sandbox", "exec", "cp", "serve", "node", "pool", "checkpoint", "rollback", "journal", "logs", "mcp", "diff", "usage", "replay", "recover", "drill", "completion", "help"}

// TestCommandHelp: every command's --help (and help CMD) prints that
// command's own usage with at least one example, touching nothing; and
// commandHelp (which completion offers) holds no other name.
func TestCommandHelp(t *testing.T) {
	for _, name := range commands {
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
			var out, errb bytes.Buffer
			code := dispatch(context.Background(), args, nil, &out, &errb)
			if code != 0 || !strings.HasPrefix(out.String(), "usage: stockade "+name) || errb.Len() > 0 {
				t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
			}
			if !strings.Contains("\n"+out.String(), "\n  stockade ") {
				t.Errorf("%q: no example (a line starting with \"  stockade \"):\n%s", args, out.String())
			}
		}
	}
	for name := range commandHelp {
		if !slices.Contains(commands, name) {
			t.Errorf("commandHelp has %q, which is not in the list of commands", name)
		}
	}
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"sandbox", "create", "--help"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "id=$(stockade sandbox create") || !strings.Contains(out.String(), "--ttl D") {
		t.Errorf("sandbox create --help: %d %q", code, out.String())
	}
	out.Reset()
	if code := dispatch(context.Background(), []string{"journal", "--help"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "--type T") || !strings.Contains(out.String(), "--json") || !strings.Contains(strings.SplitN(out.String(), "\n", 2)[0], "tail") {
		t.Errorf("journal --help: %d %q", code, out.String())
	}
}

// TestNotStarted: a command that could not start exits as a shell's would,
// 126 found but not executable, 127 not found, whether the warden's error
// arrives whole (embedded) or as text (through a server), or Docker's.
func TestNotStarted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{spec.Wrap(spec.CodeExecFailed, "process", &link.SpawnError{Code: 126, Msg: "./f: permission denied"}, "process p could not start"), 126},
		{spec.Wrap(spec.CodeExecFailed, "process", &link.SpawnError{Code: 127, Msg: "nope: not found on PATH"}, "process p could not start"), 127},
		// Through a server: the cause is only text.
		{spec.Wrap(spec.CodeExecFailed, "process", errors.New("warden: spawn failed with 126: /tmp: permission denied"), "process p could not start"), 126},
		{spec.Wrap(spec.CodeExecFailed, "process", errors.New("warden: spawn failed with 127: exit 126: not found on PATH"), "process p could not start"), 127},
		// Without the warden: Docker's report.
		{spec.Errorf(spec.CodeExecFailed, "dockerio.exec", "exit 126: permission denied"), 126},
		{spec.Errorf(spec.CodeExecFailed, "dockerio.exec", "exec e ended (exit 126) before it started: %q", "cannot execute"), 126},
		{spec.Errorf(spec.CodeExecFailed, "dockerio.exec", "exit 127: executable file not found"), 127},
		{spec.Errorf(spec.CodeExecFailed, "process", "process p ended before it could be attached (exit 1)"), 127},
	} {
		if got := startFailure(tc.err); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.err, got, tc.want)
		}
	}
	if got := startFailure(spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "stopped")); got != 125 {
		t.Errorf("a start refused by stockade: exit %d, want 125", got)
	}
}

// TestCompletion: each shell's script names every command and the
// subcommands of sandbox and journal; the bash one parses.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), []string{"completion", shell}, nil, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d %q", shell, code, errb.String())
		}
		for _, want := range []string{"sandbox", "exec", "journal", "cp", "logs", "create", "inspect", "replay", "diff"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s script lacks %q", shell, want)
			}
		}
		if shell == "bash" {
			cmd := exec.Command("bash", "-n")
			cmd.Stdin = &out
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("bash -n: %v %s", err, b)
			}
		}
	}
	if code := dispatch(context.Background(), []string{"completion", "tcsh"}, nil, io.Discard, io.Discard); code != 2 {
		t.Errorf("an unknown shell: exit %d", code)
	}
}
