package mcp

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/test/testkit"
)

// agent is an MCP client session with `stockade mcp` spawned over stdio.
type agent struct {
	t  *testing.T
	cs *mcp.ClientSession
}

func spawn(t *testing.T, ctx context.Context, e *testkit.CLIEnv) *agent {
	t.Helper()
	cmd := exec.Command(e.Bin, "--journal", e.Journal, "mcp")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to stockade mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() }) // ends the server: the journal's sandboxes are the owner cleanup's
	return &agent{t: t, cs: cs}
}

// call calls a tool; a tool error fails the test unless wantErr, when its
// text is returned.
func (a *agent) call(ctx context.Context, name string, args map[string]any, out any) string {
	a.t.Helper()
	res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		a.t.Fatalf("%s: protocol error %v", name, err)
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
		a.decode(name, res, out)
	}
	return ""
}

// decode reads a tool's structured result into out.
func (a *agent) decode(name string, res *mcp.CallToolResult, out any) {
	a.t.Helper()
	b, _ := json.Marshal(res.StructuredContent) // the SDK decoded it from JSON
	if err := json.Unmarshal(b, out); err != nil {
		a.t.Fatalf("%s: decoding %s: %v", name, b, err)
	}
}

func (a *agent) must(ctx context.Context, name string, args map[string]any, out any) {
	a.t.Helper()
	if e := a.call(ctx, name, args, out); e != "" {
		a.t.Fatalf("%s %v: tool error: %s", name, args, e)
	}
}

// TestMCPAgentSession: an agent's session over stdio against the real
// daemon: a project written, its test run and failing, what the run
// changed read with its diff, a checkpoint before a fix, the fix and a
// passing test, a rollback to the checkpoint (the fix gone), a background
// command read back through logs from offsets and waited for, hostile
// calls refused with the session going on, the sandbox removed.
func TestMCPAgentSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	image := dockertest.ImageID(t, dockertest.Client(t))
	story(t, ctx, spawn(t, ctx, e), image)
}

// story is an agent's session, through any transport: every tool, against
// the real daemon.
func story(t *testing.T, ctx context.Context, a *agent, image string) {
	t.Helper()
	var sb struct{ ID string }
	a.must(ctx, "sandbox_create", map[string]any{"image": image, "memory_bytes": 128 << 20, "labels": map[string]string{"task": "mcp"}}, &sb)
	a.must(ctx, "files_write", map[string]any{"sandbox_id": sb.ID, "path": "work/proj/calc.sh", "content": "add() { echo $(( $1 - $2 )); }\n"}, nil)
	a.must(ctx, "files_write", map[string]any{"sandbox_id": sb.ID, "path": "work/proj/test.sh",
		"content": ". ./calc.sh\nr=$(add 2 3)\necho \"add 2 3 = $r\" > result.txt\n[ \"$r\" = 5 ] || { echo FAIL >&2; exit 1; }\necho ok\n"}, nil)

	type execOut struct {
		ProcessID string `json:"process_id"`
		ExitCode  int    `json:"exit_code"`
		Reason    string `json:"reason"`
		Stdout    string `json:"stdout"`
		Stderr    string `json:"stderr"`
	}
	var run execOut
	a.must(ctx, "exec", map[string]any{"sandbox_id": sb.ID, "command": "sh test.sh", "dir": "work/proj"}, &run)
	if run.ExitCode != 1 || run.Stderr != "FAIL\n" {
		t.Fatalf("the failing test: %+v", run)
	}
	var changed struct {
		Changes struct {
			Created int `json:"created"`
		} `json:"changes"`
		Diffs []struct{ Path, Unified string } `json:"diffs"`
	}
	a.must(ctx, "changes", map[string]any{"process_id": run.ProcessID}, &changed)
	if changed.Changes.Created != 1 || len(changed.Diffs) != 1 || changed.Diffs[0].Path != "/workspace/work/proj/result.txt" || !strings.Contains(changed.Diffs[0].Unified, "+add 2 3 = -1") {
		t.Fatalf("what the test run changed: %+v", changed)
	}
	var ck struct{ ID string }
	a.must(ctx, "checkpoint", map[string]any{"sandbox_id": sb.ID, "name": "before-fix"}, &ck)
	a.must(ctx, "files_write", map[string]any{"sandbox_id": sb.ID, "path": "/workspace/work/proj/calc.sh", "content": "add() { echo $(( $1 + $2 )); }\n"}, nil)
	a.must(ctx, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"sh", "test.sh"}, "dir": "/workspace/work/proj"}, &run)
	if run.ExitCode != 0 || run.Stdout != "ok\n" {
		t.Fatalf("the test after the fix: %+v", run)
	}
	a.must(ctx, "rollback", map[string]any{"sandbox_id": sb.ID, "checkpoint": "before-fix"}, nil)
	var read struct{ Content string }
	a.must(ctx, "files_read", map[string]any{"sandbox_id": sb.ID, "path": "work/proj/calc.sh"}, &read)
	if !strings.Contains(read.Content, "$1 - $2") {
		t.Fatalf("after the rollback calc.sh is %q, want the unfixed one", read.Content)
	}

	// A fork from the checkpoint has the unfixed project too; the
	// session so far re-runs in a new sandbox and is compared.
	var fork struct{ ID, Checkpoint string }
	a.must(ctx, "fork", map[string]any{"checkpoint": ck.ID}, &fork)
	a.must(ctx, "files_read", map[string]any{"sandbox_id": fork.ID, "path": "work/proj/calc.sh"}, &read)
	if !strings.Contains(read.Content, "$1 - $2") {
		t.Fatalf("the fork's calc.sh is %q, want the checkpoint's", read.Content)
	}
	a.must(ctx, "sandbox_remove", map[string]any{"sandbox_id": fork.ID}, nil)
	var rep struct {
		Processes []struct {
			Argv []string `json:"argv"`
			Same bool     `json:"same"`
		} `json:"processes"`
	}
	a.must(ctx, "rerun", map[string]any{"sandbox_id": sb.ID, "until": 1 << 20}, &rep)
	if len(rep.Processes) < 2 {
		t.Fatalf("the re-run compared %d processes, want the session's", len(rep.Processes))
	}

	var bg struct {
		ProcessID string `json:"process_id"`
	}
	a.must(ctx, "exec_background", map[string]any{"sandbox_id": sb.ID, "command": "i=0; while [ $i -lt 500 ]; do echo line $i; i=$((i+1)); done"}, &bg)
	var w struct {
		Ended    bool `json:"ended"`
		ExitCode *int `json:"exit_code"`
	}
	a.must(ctx, "wait", map[string]any{"process_id": bg.ProcessID, "max_wait_seconds": 60}, &w)
	if !w.Ended || w.ExitCode == nil || *w.ExitCode != 0 {
		t.Fatalf("wait: %+v", w)
	}
	var whole strings.Builder
	from := int64(0)
	for range 100 {
		var page struct {
			Output     string `json:"output"`
			NextOffset int64  `json:"next_offset"`
			More       bool   `json:"more"`
		}
		a.must(ctx, "logs", map[string]any{"process_id": bg.ProcessID, "offset": from, "max_bytes": 1000}, &page)
		whole.WriteString(page.Output)
		from = page.NextOffset
		if !page.More {
			break
		}
	}
	var want strings.Builder
	for i := range 500 {
		want.WriteString("line " + itoa(i) + "\n")
	}
	if whole.String() != want.String() {
		t.Fatalf("the background output through logs: %d bytes, want %d (first difference at %d)", whole.Len(), want.Len(), testkit.FirstDiff(whole.String(), want.String()))
	}

	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"files_write", map[string]any{"sandbox_id": sb.ID, "path": "../../etc/passwd", "content": "x"}, "invalid_argument"},
		{"exec", map[string]any{"sandbox_id": sb.ID}, "argv is empty"},
		{"exec", map[string]any{"sandbox_id": "sb-nosuch", "argv": []string{"true"}}, "not_found"},
		{"changes", map[string]any{"process_id": "nosuch"}, "not_found"},
	} {
		if got := a.call(ctx, c.tool, c.args, nil); !strings.Contains(got, c.want) {
			t.Errorf("%s %v: %q, want a tool error with %q", c.tool, c.args, got, c.want)
		}
	}
	// The rest of the tools: the sandbox listed with its label, the
	// project's files listed and stated, one removed, the history paged.
	var list struct {
		Sandboxes []struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
		} `json:"sandboxes"`
	}
	a.must(ctx, "sandbox_list", map[string]any{}, &list)
	found := false
	for _, s := range list.Sandboxes {
		found = found || s.ID == sb.ID && s.Labels["task"] == "mcp"
	}
	if !found {
		t.Fatalf("sandbox_list: %+v, want %s labelled task=mcp", list, sb.ID)
	}
	var dir struct {
		Entries []struct{ Name, Kind string } `json:"entries"`
	}
	a.must(ctx, "files_list", map[string]any{"sandbox_id": sb.ID, "path": "work/proj"}, &dir)
	if len(dir.Entries) < 2 {
		t.Fatalf("files_list of the project: %+v", dir)
	}
	var st struct {
		Kind string `json:"kind"`
		Size int64  `json:"size"`
	}
	a.must(ctx, "files_stat", map[string]any{"sandbox_id": sb.ID, "path": "work/proj/calc.sh"}, &st)
	if st.Kind != "file" || st.Size == 0 {
		t.Fatalf("files_stat: %+v", st)
	}
	a.must(ctx, "files_remove", map[string]any{"sandbox_id": sb.ID, "path": "work/proj/result.txt"}, nil)
	if got := a.call(ctx, "files_stat", map[string]any{"sandbox_id": sb.ID, "path": "work/proj/result.txt"}, nil); !strings.Contains(got, "not_found") {
		t.Fatalf("files_stat after files_remove: %q", got)
	}
	var page struct {
		Events []struct{ Type string } `json:"events"`
		More   bool                    `json:"more"`
	}
	a.must(ctx, "history", map[string]any{"sandbox_id": sb.ID, "limit": 5}, &page)
	if len(page.Events) != 5 || !page.More || page.Events[0].Type != "sandbox.reserved" {
		t.Fatalf("history: %+v", page)
	}
	a.must(ctx, "sandbox_remove", map[string]any{"sandbox_id": sb.ID}, nil)
}

func itoa(i int) string {
	b, _ := json.Marshal(i) // an int: never fails
	return string(b)
}

// TestMCPHostileCalls: malformed calls to the spawned binary (wrong types,
// missing fields, huge and deep arguments, escaping paths, unknown tools
// and ids) each get a tool or protocol error, and the same session then
// serves a good call: nothing crashes the server.
func TestMCPHostileCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	image := dockertest.ImageID(t, dockertest.Client(t))
	a := spawn(t, ctx, e)
	var sb struct{ ID string }
	a.must(ctx, "sandbox_create", map[string]any{"image": image, "memory_bytes": 128 << 20}, &sb)
	deep := any("x")
	for range 200 {
		deep = []any{deep}
	}
	for i, args := range []struct {
		tool string
		args map[string]any
	}{
		{"sandbox_create", map[string]any{"image": 7}},
		{"sandbox_create", map[string]any{"image": strings.Repeat("a", 1<<20)}},
		{"sandbox_create", map[string]any{"image": image, "labels": "not a map"}},
		{"sandbox_create", map[string]any{"image": image, "network": "allow=*"}},
		{"sandbox_create", map[string]any{"image": image, "cpus": -3}},
		{"exec", map[string]any{"sandbox_id": sb.ID, "argv": deep}},
		{"exec", map[string]any{"sandbox_id": sb.ID, "argv": []any{1, 2}}},
		{"exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{strings.Repeat("b", 200<<10)}}},
		{"exec", map[string]any{"sandbox_id": sb.ID, "command": "true", "env": []string{"=x"}}},
		{"exec", map[string]any{"sandbox_id": sb.ID, "command": "true", "timeout_seconds": -1}},
		{"exec", map[string]any{"sandbox_id": sb.ID + "/../x", "command": "true"}},
		{"logs", map[string]any{"process_id": "../../etc/passwd"}},
		{"logs", map[string]any{"process_id": "x", "max_bytes": -1}},
		{"wait", map[string]any{"process_id": "x", "timeout_seconds": "soon"}},
		{"files_write", map[string]any{"sandbox_id": sb.ID, "path": "/workspace/../etc/x", "content": "x"}},
		{"files_write", map[string]any{"sandbox_id": sb.ID, "path": "work/big", "content": strings.Repeat("c", 17<<20)}},
		{"files_read", map[string]any{"sandbox_id": sb.ID, "path": ".stockade/stockade-warden"}},
		{"files_read", map[string]any{"sandbox_id": sb.ID, "path": "work/x", "offset": -4}},
		{"files_remove", map[string]any{"sandbox_id": sb.ID, "path": "/workspace"}},
		{"checkpoint", map[string]any{"sandbox_id": sb.ID, "name": "bad/name"}},
		{"rollback", map[string]any{"sandbox_id": sb.ID}},
		{"fork", map[string]any{}},
		{"history", map[string]any{"sandbox_id": sb.ID, "limit": -1}},
	} {
		res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: args.tool, Arguments: args.args})
		if err == nil && !res.IsError {
			t.Errorf("call %d (%s): accepted", i, args.tool)
		}
	}
	if _, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil {
		t.Error("an unknown tool was called")
	}
	var run struct {
		Stdout string `json:"stdout"`
	}
	a.must(ctx, "exec", map[string]any{"sandbox_id": sb.ID, "command": "echo still here"}, &run)
	if run.Stdout != "still here\n" {
		t.Fatalf("after the hostile calls: %+v", run)
	}
}
