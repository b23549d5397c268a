package mcp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/otlptest"
	"github.com/stockade/stockade/test/testkit"
)

// TestMCPTraceparent: an agent whose tool calls carry a W3C traceparent in
// their _meta (as the official SDK's client sends it) finds the runtime's
// spans of each call under its own: `stockade mcp`, started with the
// OTEL_* environment, exports them (OTLP http/protobuf) to a receiver in
// the test.
func TestMCPTraceparent(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.HTTP)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	image := dockertest.ImageID(t, dockertest.Client(t))
	a := spawn(t, ctx, e)
	traceID := fmt.Sprintf("%032x", time.Now().UnixNano())
	parent := func(n int) string { return fmt.Sprintf("%016x", 0xa9e47000+n) }
	call := func(n int, name string, args map[string]any, out any) {
		t.Helper()
		res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args,
			Meta: mcp.Meta{"traceparent": "00-" + traceID + "-" + parent(n) + "-01"}})
		if err != nil || res.IsError {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
		if out != nil {
			a.decode(name, res, out)
		}
	}
	var sb struct {
		ID string `json:"id"`
	}
	call(1, "sandbox_create", map[string]any{"image": image, "memory_bytes": 128 << 20}, &sb)
	call(2, "exec", map[string]any{"sandbox_id": sb.ID, "command": "echo traced"}, nil)
	call(3, "sandbox_remove", map[string]any{"sandbox_id": sb.ID}, nil)
	want := map[string]string{"stockade.sandbox.create": parent(1), "stockade.process": parent(2), "stockade.sandbox.remove": parent(3)}
	rcv.Await(t, ctx, traceID, func(spans []otlptest.Span) bool {
		under := map[string]string{}
		for _, s := range spans {
			if _, ok := want[s.Name]; ok && s.Attr("stockade.sandbox.id") == sb.ID {
				under[s.Name] = s.Parent()
			}
		}
		for name, p := range want {
			if under[name] != p {
				return false
			}
		}
		return true
	})
}
