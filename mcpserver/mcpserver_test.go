package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/mcpserver"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

const fakeImage = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

// script models the commands the tests run on the Fake.
func script(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
	switch strings.Join(req.Spec.Argv, " ") {
	case "echo hello":
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("hello\n")}}}
	case "/bin/sh -c big":
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte(strings.Repeat("x", 1000))}, {Stream: framing.Stderr, Data: []byte("oops\n")}}, ExitCode: 4}
	}
	return dockerio.FakeRun{}
}

// session is an MCP client session with a server over a runtime on the
// Fake, through the SDK's own client and in-memory transports.
func session(t *testing.T) *mcp.ClientSession { return sessionWith(t, script, nil) }

func sessionWith(t *testing.T, sc func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	f := testutil.NewFake(t)
	f.Script = sc
	journal := filepath.Join(t.TempDir(), "journal.db")
	rt := testutil.OpenFake(t, f, journal)
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ss, err := mcpserver.New(rt.Host(), mcpserver.Options{Journal: journal}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() }) // the test's session: nothing to keep
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() }) // likewise
	return cs
}

// call calls a tool and decodes its structured result into out; a tool
// error is returned as its text.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any, out any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		return strings.Join(text, "\n")
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decoding %s: %v", name, b, err)
		}
	}
	return ""
}

func must(t *testing.T, cs *mcp.ClientSession, name string, args any, out any) {
	t.Helper()
	if e := call(t, cs, name, args, out); e != "" {
		t.Fatalf("%s: tool error %s", name, e)
	}
}

// TestToolsListed: every tool is listed, with a description and an input
// schema an agent can fill.
func TestToolsListed(t *testing.T) {
	cs := session(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, tool := range res.Tools {
		if tool.Description == "" || tool.InputSchema == nil {
			t.Fatalf("tool %s has no description or input schema", tool.Name)
		}
		got[tool.Name] = true
	}
	for _, name := range []string{"sandbox_create", "sandbox_list", "sandbox_remove", "exec", "exec_background", "logs", "wait",
		"files_write", "files_read", "files_list", "files_stat", "files_remove", "changes", "checkpoint", "rollback", "history"} {
		if !got[name] {
			t.Errorf("tool %s is not listed", name)
		}
	}
}

// TestToolsDriveASandbox: a sandbox made, a command run with its output
// and exit, one cut at a bound with a marker, one in the background read
// back through logs from offsets and waited for, files written into
// directories that did not exist and read back, the history paged, the
// sandbox removed.
func TestToolsDriveASandbox(t *testing.T) {
	cs := session(t)
	var made mcpserver.SandboxCreateOut
	must(t, cs, "sandbox_create", map[string]any{"image": fakeImage, "labels": map[string]string{"task": "t1"}}, &made)
	if made.ID == "" {
		t.Fatal("no sandbox id")
	}
	var ran mcpserver.ExecOut
	must(t, cs, "exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"echo", "hello"}}, &ran)
	if ran.Stdout != "hello\n" || ran.ExitCode != 0 || ran.Reason != "exited" || ran.ProcessID == "" || ran.Truncated {
		t.Fatalf("exec: %+v", ran)
	}
	var cut mcpserver.ExecOut
	must(t, cs, "exec", map[string]any{"sandbox_id": made.ID, "command": "big", "max_output_bytes": 100}, &cut)
	if !cut.Truncated || !strings.HasPrefix(cut.Stdout, strings.Repeat("x", 100)+"\n[stockade: 900 more bytes of stdout cut here") ||
		!strings.Contains(cut.Stdout, cut.ProcessID) || cut.Stderr != "oops\n" || cut.ExitCode != 4 || cut.StdoutBytes != 1000 {
		t.Fatalf("a cut exec: %+v", cut)
	}
	// The whole output, as recorded, in windows.
	var w1, w2 mcpserver.LogsOut
	must(t, cs, "logs", map[string]any{"process_id": cut.ProcessID, "max_bytes": 600}, &w1)
	must(t, cs, "logs", map[string]any{"process_id": cut.ProcessID, "offset": w1.NextOffset, "max_bytes": 600}, &w2)
	// stdout and stderr come in the order the recording has them (a
	// warden reads the two pipes apart): the windows hold both, once.
	whole := w1.Output + w2.Output
	if len(w1.Output) != 600 || !w1.More || w1.NextOffset != 600 || len(whole) != 1005 || strings.Count(whole, "x") != 1000 ||
		strings.Count(whole, "oops\n") != 1 || w1.Stderr+w2.Stderr != "oops\n" || w2.More || !w2.Ended || w2.ExitCode == nil || *w2.ExitCode != 4 {
		t.Fatalf("logs windows: %+v / %+v", w1, w2)
	}
	var bg mcpserver.BackgroundOut
	must(t, cs, "exec_background", map[string]any{"sandbox_id": made.ID, "argv": []string{"echo", "hello"}}, &bg)
	var waited mcpserver.WaitOut
	must(t, cs, "wait", map[string]any{"process_id": bg.ProcessID, "max_wait_seconds": 30}, &waited)
	if !waited.Ended || waited.ExitCode == nil || *waited.ExitCode != 0 {
		t.Fatalf("wait: %+v", waited)
	}
	var bgLogs mcpserver.LogsOut
	must(t, cs, "logs", map[string]any{"process_id": bg.ProcessID}, &bgLogs)
	if bgLogs.Output != "hello\n" || !bgLogs.Ended {
		t.Fatalf("a background process's logs: %+v", bgLogs)
	}
	var wrote mcpserver.FileWritten
	must(t, cs, "files_write", map[string]any{"sandbox_id": made.ID, "path": "work/src/a.txt", "content": "one\ntwo\n"}, &wrote)
	if wrote.Path != "/workspace/work/src/a.txt" || wrote.Size != 8 {
		t.Fatalf("files_write: %+v", wrote)
	}
	var read mcpserver.FileRead
	must(t, cs, "files_read", map[string]any{"sandbox_id": made.ID, "path": "/workspace/work/src/a.txt", "offset": 4}, &read)
	if read.Content != "two\n" || read.Size != 8 || read.More || read.Encoding != "text" {
		t.Fatalf("files_read: %+v", read)
	}
	must(t, cs, "files_write", map[string]any{"sandbox_id": made.ID, "path": "work/bin.dat", "content": "AP8=", "encoding": "base64"}, nil)
	must(t, cs, "files_read", map[string]any{"sandbox_id": made.ID, "path": "work/bin.dat"}, &read)
	if read.Content != "AP8=" || read.Encoding != "base64" {
		t.Fatalf("files_read of binary: %+v", read)
	}
	var listing struct {
		Entries []struct{ Name, Kind string } `json:"entries"`
	}
	must(t, cs, "files_list", map[string]any{"sandbox_id": made.ID, "path": "work/src"}, &listing)
	if len(listing.Entries) != 1 || listing.Entries[0].Name != "a.txt" || listing.Entries[0].Kind != "file" {
		t.Fatalf("files_list: %+v", listing)
	}
	var changes struct {
		Process string `json:"process"`
	}
	must(t, cs, "changes", map[string]any{"process_id": ran.ProcessID}, &changes)
	if changes.Process != ran.ProcessID {
		t.Fatalf("changes: %+v", changes)
	}
	var page mcpserver.HistoryOut
	must(t, cs, "history", map[string]any{"sandbox_id": made.ID, "limit": 3}, &page)
	if len(page.Events) != 3 || !page.More || page.NextOffset != 3 || page.Events[0].Type != "sandbox.reserved" {
		t.Fatalf("history page: %d events, %+v", len(page.Events), page)
	}
	// The warden's secret is the runtime's: withheld from every event.
	var all mcpserver.HistoryOut
	must(t, cs, "history", map[string]any{"sandbox_id": made.ID}, &all)
	withheld := 0
	for _, e := range all.Events {
		if p, ok := e.Payload.(map[string]any); ok && p["secret"] != nil {
			if p["secret"] != "(withheld)" {
				t.Fatalf("%s hands out the warden's secret: %v", e.Type, p)
			}
			withheld++
		}
	}
	if withheld == 0 {
		t.Fatal("no event with the warden's secret to withhold: the check checks nothing")
	}
	var list mcpserver.SandboxListOut
	must(t, cs, "sandbox_list", map[string]any{}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Labels["task"] != "t1" {
		t.Fatalf("sandbox_list: %+v", list)
	}
	must(t, cs, "sandbox_remove", map[string]any{"sandbox_id": made.ID}, nil)
	must(t, cs, "sandbox_list", map[string]any{}, &list)
	if len(list.Sandboxes) != 0 {
		t.Fatalf("after remove: %+v", list)
	}
}

// TestHostileCalls: malformed calls each get a tool error (or, for an
// unknown tool, a protocol error) naming what was wrong, and the session
// goes on serving.
func TestHostileCalls(t *testing.T) {
	cs := session(t)
	var made mcpserver.SandboxCreateOut
	must(t, cs, "sandbox_create", map[string]any{"image": fakeImage}, &made)
	huge := strings.Repeat("A", 2<<20)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"sandbox_create", map[string]any{"image": 42}, "image"},
		{"sandbox_create", map[string]any{"image": "Upper:Case"}, "invalid_argument"},
		{"sandbox_create", map[string]any{"image": fakeImage, "network": "allow=https://example.com"}, "not a URL"},
		{"sandbox_create", map[string]any{"image": fakeImage, "memory_bytes": "lots"}, "memory_bytes"},
		{"sandbox_create", map[string]any{"image": fakeImage, "ttl_seconds": -1}, "negative"},
		{"sandbox_create", map[string]any{"image": huge}, "invalid_argument"},
		{"sandbox_remove", map[string]any{"sandbox_id": "sb-nosuch"}, "not_found"},
		{"exec", map[string]any{"sandbox_id": made.ID}, "argv is empty"},
		{"exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"x"}, "command": "y"}, "not both"},
		{"exec", map[string]any{"sandbox_id": made.ID, "argv": "echo hi"}, "argv"},
		{"exec", map[string]any{"sandbox_id": made.ID, "argv": []string{""}}, "invalid_argument"},
		{"exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"true"}, "dir": "../etc"}, "invalid_argument"},
		{"exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"true"}, "max_output_bytes": 1 << 30}, "over the limit"},
		{"exec", map[string]any{"sandbox_id": "sb-nosuch", "argv": []string{"true"}}, "not_found"},
		{"exec_background", map[string]any{"sandbox_id": made.ID, "argv": []string{"true"}, "stdin": "x"}, "stdin"},
		{"logs", map[string]any{"process_id": "nosuch"}, "not_found"},
		{"logs", map[string]any{"process_id": "nosuch", "offset": -5}, "negative"},
		{"wait", map[string]any{"process_id": "nosuch", "max_wait_seconds": 100000}, "over the limit"},
		{"files_write", map[string]any{"sandbox_id": made.ID, "path": "work/m", "content": "x", "mode": 755}, "decimal"},
		{"files_write", map[string]any{"sandbox_id": made.ID, "path": "../../etc/passwd", "content": "x"}, "invalid_argument"},
		{"files_write", map[string]any{"sandbox_id": made.ID, "path": "/workspace/.stockade/w", "content": "x"}, "runtime's own"},
		{"files_write", map[string]any{"sandbox_id": made.ID, "path": "work/x", "content": "!!", "encoding": "base64"}, "not base64"},
		{"files_write", map[string]any{"sandbox_id": made.ID, "path": "work/x", "content": "x", "encoding": "rot13"}, "neither"},
		{"files_read", map[string]any{"sandbox_id": made.ID, "path": "/etc/shadow"}, "outside"},
		{"files_read", map[string]any{"sandbox_id": made.ID, "path": "work/none"}, "not_found"},
		{"files_list", map[string]any{"sandbox_id": made.ID, "path": "work\x00x"}, "invalid_argument"},
		{"changes", map[string]any{"process_id": "nosuch"}, "not_found"},
		{"rollback", map[string]any{"sandbox_id": made.ID, "checkpoint": "never-taken"}, "not_found"},
		{"history", map[string]any{"sandbox_id": "sb-nosuch"}, "not_found"},
	} {
		got := call(t, cs, c.tool, c.args, nil)
		if got == "" || !strings.Contains(got, c.want) {
			t.Errorf("%s %v: %q, want a tool error with %q", c.tool, truncate(c.args), got, c.want)
		}
	}
	// An unknown tool is the protocol's error.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sandbox_explode", Arguments: map[string]any{}}); err == nil {
		t.Error("an unknown tool was called")
	}
	// The session still serves.
	var ran mcpserver.ExecOut
	must(t, cs, "exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"echo", "hello"}}, &ran)
	if ran.Stdout != "hello\n" {
		t.Fatalf("after the hostile calls: %+v", ran)
	}
}

func truncate(v any) string {
	s := strings.ReplaceAll(strings.TrimSpace(fmtAny(v)), "\n", " ")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

func fmtAny(v any) string {
	b, _ := json.Marshal(v) // test output only
	return string(b)
}

// TestForkAndRerun: a sandbox forked from its live workspace and from
// the checkpoint that took, and its session re-run and compared: the
// same, no divergence.
func TestForkAndRerun(t *testing.T) {
	cs := session(t)
	var made mcpserver.SandboxCreateOut
	must(t, cs, "sandbox_create", map[string]any{"image": fakeImage}, &made)
	must(t, cs, "files_write", map[string]any{"sandbox_id": made.ID, "path": "work/a.txt", "content": "kept\n"}, nil)
	var ran mcpserver.ExecOut
	must(t, cs, "exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"echo", "hello"}}, &ran)
	var forked mcpserver.ForkOut
	must(t, cs, "fork", map[string]any{"sandbox_id": made.ID, "labels": map[string]string{"from": made.ID}}, &forked)
	if forked.ID == "" || forked.ID == made.ID || !strings.HasPrefix(forked.Checkpoint, "ck-") {
		t.Fatalf("fork: %+v", forked)
	}
	var read mcpserver.FileRead
	must(t, cs, "files_read", map[string]any{"sandbox_id": forked.ID, "path": "work/a.txt"}, &read)
	if read.Content != "kept\n" {
		t.Fatalf("the fork's workspace: %+v", read)
	}
	var again mcpserver.ForkOut
	must(t, cs, "fork", map[string]any{"checkpoint": forked.Checkpoint}, &again)
	if again.ID == "" || again.Checkpoint != forked.Checkpoint {
		t.Fatalf("fork from a checkpoint: %+v", again)
	}
	if e := call(t, cs, "fork", map[string]any{"sandbox_id": made.ID, "checkpoint": forked.Checkpoint}, nil); !strings.Contains(e, "one of them") {
		t.Fatalf("fork with both: %q", e)
	}
	var rep struct {
		Diverged  bool              `json:"diverged"`
		Processes []json.RawMessage `json:"processes"`
	}
	must(t, cs, "rerun", map[string]any{"sandbox_id": made.ID}, &rep)
	if rep.Diverged || len(rep.Processes) != 1 {
		t.Fatalf("rerun: %+v", rep)
	}
}

// TestResources: a sandbox's history and a process's output as
// resources; a subscriber to a running process's output hears of its new
// output, and an unknown resource is the protocol's not-found.
func TestResources(t *testing.T) {
	hold := make(chan struct{})
	sc := func(sb dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		if strings.Join(req.Spec.Argv, " ") == "held" {
			return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("before\n")}}, Hold: hold,
				After: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("after\n")}}}
		}
		return script(sb, req)
	}
	updated := make(chan string, 16)
	cs := sessionWith(t, sc, &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		updated <- r.Params.URI
	}})
	ctx := context.Background()
	var made mcpserver.SandboxCreateOut
	must(t, cs, "sandbox_create", map[string]any{"image": fakeImage}, &made)
	var bg mcpserver.BackgroundOut
	must(t, cs, "exec_background", map[string]any{"sandbox_id": made.ID, "argv": []string{"held"}}, &bg)
	uri := "stockade://process/" + bg.ProcessID + "/output"
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the output before the hold", func() bool {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		return err == nil && len(res.Contents) == 1 && res.Contents[0].Text == "before\n"
	})
	close(hold)
	select {
	case got := <-updated:
		if got != uri {
			t.Fatalf("an update of %s, want %s", got, uri)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no update of the subscribed output")
	}
	testutil.Eventually(t, "the whole output", func() bool {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		return err == nil && res.Contents[0].Text == "before\nafter\n"
	})
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "stockade://sandbox/" + made.ID + "/history"})
	if err != nil {
		t.Fatal(err)
	}
	var page mcpserver.HistoryOut
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &page); err != nil || len(page.Events) < 3 || page.Events[0].Type != "sandbox.reserved" {
		t.Fatalf("the history resource: %v %+v", err, page)
	}
	for _, bad := range []string{"stockade://process/nosuch/output", "stockade://sandbox/sb-nosuch/history"} {
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: bad}); err == nil {
			t.Errorf("%s was read", bad)
		}
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
}

// TestExecGivesUp: an exec whose command outlives max_wait_seconds
// returns with what it wrote so far and ended false; the command runs on,
// and wait and logs find its end and its whole output.
func TestExecGivesUp(t *testing.T) {
	hold := make(chan struct{})
	sc := func(sb dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		if strings.Join(req.Spec.Argv, " ") == "server" {
			return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("listening\n")}}, Hold: hold,
				After: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("bye\n")}}}
		}
		return script(sb, req)
	}
	cs := sessionWith(t, sc, nil)
	var made mcpserver.SandboxCreateOut
	must(t, cs, "sandbox_create", map[string]any{"image": fakeImage}, &made)
	var ran mcpserver.ExecOut
	must(t, cs, "exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"server"}, "max_wait_seconds": 1}, &ran)
	if ran.Ended || ran.Stdout != "listening\n" || ran.ProcessID == "" {
		t.Fatalf("an exec past its wait: %+v", ran)
	}
	close(hold)
	var w mcpserver.WaitOut
	must(t, cs, "wait", map[string]any{"process_id": ran.ProcessID, "max_wait_seconds": 30}, &w)
	var logs mcpserver.LogsOut
	must(t, cs, "logs", map[string]any{"process_id": ran.ProcessID}, &logs)
	if !w.Ended || logs.Output != "listening\nbye\n" {
		t.Fatalf("after the wait: %+v %+v", w, logs)
	}
	if e := call(t, cs, "exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"true"}, "max_wait_seconds": 601}, nil); !strings.Contains(e, "over the limit") {
		t.Fatalf("max_wait_seconds 601: %q", e)
	}
}
