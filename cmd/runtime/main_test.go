package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512m", 512 << 20, true}, {"1G", 1 << 30, true}, {"64k", 64 << 10, true}, {"4096", 4096, true},
		{"", 0, false}, {"-1m", 0, false}, {"0", 0, false}, {"lots", 0, false}, {"99999999999g", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil && !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("parseBytes(%q): untyped error %v", tc.in, err)
		}
	}
}

func TestParseUser(t *testing.T) {
	if u, err := parseUser("1000:1001"); err != nil || u.UID != 1000 || u.GID != 1001 {
		t.Fatalf("%+v %v", u, err)
	}
	for _, bad := range []string{"", "1000", "a:b", "1:2:3"} {
		if _, err := parseUser(bad); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("parseUser(%q): %v", bad, err)
		}
	}
}

// TestUsage: bad usage exits 2 with a message; nothing opens a journal.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"run"}, {"run", "--memory", "lots", "--", "true"}, {"run", "--user", "root", "--", "true"}, {"journal"}, {"journal", "nope"}} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), args, nil, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
		if errb.Len() == 0 {
			t.Errorf("%v: no message", args)
		}
	}
}

// TestJournalCommands runs the read-only journal commands on a journal made
// here: show, replay --at, verify, export, ls.
func TestJournalCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	add := func(k journal.Key, parent string, ev lifecycle.Event) {
		typ, payload, _ := lifecycle.Encode(ev)
		if _, err := j.Append(ctx, journal.Record{Key: k, Parent: parent, Type: typ, Payload: payload, Terminal: lifecycle.Terminal(ev)}); err != nil {
			t.Fatal(err)
		}
	}
	sb := journal.Key{Kind: journal.KindSandbox, ID: "sb1"}
	pr := journal.Key{Kind: journal.KindProcess, ID: "p1"}
	add(sb, "", lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Lifetime: spec.Kept}})
	add(sb, "", lifecycle.SandboxCreated{Workload: "w"})
	add(sb, "", lifecycle.SandboxStarted{})
	add(pr, "sb1", lifecycle.ProcessReserved{Sandbox: "sb1", Spec: spec.Process{Argv: []string{"true"}}})
	j.Close()

	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := dispatch(ctx, append(args, "--journal", path), nil, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, e := run("journal", "show", "sb1"); code != 0 || !strings.Contains(out, "sandbox.started") || !strings.Contains(out, "process.reserved") {
		t.Fatalf("show: %d %q %q", code, out, e)
	}
	if code, out, e := run("journal", "replay", "sb1", "--at", "2"); code != 0 || !strings.Contains(out, `"Phase": "reserved"`) || !strings.Contains(out, `"workload": "w"`) || !strings.Contains(out, `"ID": "sb1"`) {
		t.Fatalf("replay --at 2: %d %q %q", code, out, e)
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
	if code, _, e := run("journal", "show", "nosuch"); code != 1 || !strings.Contains(e, "not_found") {
		t.Fatalf("show of an unknown sandbox: %d %q", code, e)
	}
}
