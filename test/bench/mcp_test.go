package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// mcpAgent is `stockade mcp` spawned over stdio by the SDK's client,
// through the server at sock.
func mcpAgent(b *testing.B, e *testkit.CLIEnv, sock string) *mcp.ClientSession {
	b.Helper()
	cmd := exec.Command(e.Bin, "--journal", e.Journal, "mcp")
	cmd.Env = append(os.Environ(), "STOCKADE_SOCKET="+sock)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "0"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpCall calls a tool and decodes its result.
func mcpCall(b *testing.B, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	b.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		b.Fatalf("%s: %v %+v", name, err, res)
	}
	if out != nil {
		raw, _ := json.Marshal(res.StructuredContent) // decoded from JSON by the SDK
		if err := json.Unmarshal(raw, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMCPExecTrue: the exec tool running `true` in a kept sandbox,
// through `stockade mcp` on stdio (the SDK's client, one session) and the
// server, vs `stockade exec ID -- true` (a CLI process each time, through
// the same server), alternating.
//
//	go test -run '^$' -bench BenchmarkMCPExecTrue -benchtime 40x ./test/bench/
func BenchmarkMCPExecTrue(b *testing.B) {
	e, c, sock := benchCLIServer(b)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
	if err != nil {
		b.Fatal(err)
	}
	cs := mcpAgent(b, e, sock)
	var viaMCP, viaCLI time.Duration
	alternate(b.N, func() {
		t0 := time.Now()
		var out struct {
			ExitCode int `json:"exit_code"`
		}
		mcpCall(b, cs, "exec", map[string]any{"sandbox_id": sb.ID(), "argv": []string{"true"}}, &out)
		if out.ExitCode != 0 {
			b.Fatalf("exec true: %+v", out)
		}
		viaMCP += time.Since(t0)
	}, func() {
		t0 := time.Now()
		cmd := exec.Command(e.Bin, "exec", sb.ID(), "--", "true")
		cmd.Env = append(os.Environ(), "STOCKADE_SOCKET="+sock)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("stockade exec: %v %s", err, out)
		}
		viaCLI += time.Since(t0)
	})
	report(b, "mcp-exec", viaMCP, "cli-exec", viaCLI)
}

// BenchmarkMCPTimeToFirstExec: from sandbox_create (claiming a warm
// pooled sandbox of `stockade serve --pool`) to the first exec's result,
// through `stockade mcp`; the sandbox is removed outside the timing, and
// each sample waits (untimed) for the pool to refill.
//
//	go test -run '^$' -bench BenchmarkMCPTimeToFirstExec -benchtime 20x ./test/bench/
func BenchmarkMCPTimeToFirstExec(b *testing.B) {
	pol := testkit.SmallPolicy()
	e, c, sock := benchCLIServer(b, "--pool", "mcp=image="+dockertest.ImageTag+",memory=128m,pids=64,size=2")
	ctx := context.Background()
	cs := mcpAgent(b, e, sock)
	var samples []time.Duration
	for range b.N {
		for end := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
			ps, err := c.Pools(ctx)
			if err == nil && len(ps) == 1 && ps[0].Ready == ps[0].Size && ps[0].Filling == 0 {
				break
			}
			if time.Now().After(end) {
				b.Fatal("the pool never refilled")
			}
		}
		t0 := time.Now()
		var made struct{ ID string }
		mcpCall(b, cs, "sandbox_create", map[string]any{"image": dockertest.ImageTag, "memory_bytes": pol.MemoryBytes, "pids": pol.Pids}, &made)
		var out struct {
			Stdout string `json:"stdout"`
		}
		mcpCall(b, cs, "exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"echo", "ok"}}, &out)
		samples = append(samples, time.Since(t0))
		if out.Stdout != "ok\n" {
			b.Fatalf("the first exec: %+v", out)
		}
		sb, err := c.Sandbox(ctx, made.ID)
		if err != nil {
			b.Fatal(err)
		}
		if st, err := sb.State(ctx); err != nil || !st.Claimed {
			b.Fatalf("the sandbox was not claimed from the pool: %v", err)
		}
		if err := sb.Remove(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(testkit.Ms(testkit.Percentile(samples, 0.5)), "create-to-first-exec-p50-ms")
	b.ReportMetric(testkit.Ms(testkit.Percentile(samples, 0.99)), "create-to-first-exec-p99-ms")
}
