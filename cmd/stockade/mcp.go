package main

import (
	"context"
	"errors"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/mcpserver"
	"github.com/stockade/stockade/spec"
)

// mcpCmd serves the runtime to an agent over MCP on stdin and stdout: the
// tools of package mcpserver over the journal's server when one answers,
// else over an embedded runtime held for the session's duration.
type mcpCmd struct{ g global }

func parseMCP(g global, args []string) (command, error) {
	c := &mcpCmd{g: g}
	pos, err := parseArgs(newFlags("mcp", &c.g), args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("mcp", pos, 0, "stockade mcp"); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *mcpCmd) execute(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	rt, served, err := connect(ctx, c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	// An embedded runtime's Close closes its journal (kept sandboxes run
	// on); a client's, its connection.
	defer func() {
		if err := rt.Close(); err != nil {
			_ = fail(stderr, err, 1) // the session's end is said; the exit is its
		}
	}()
	if served {
		note(stderr, "mcp: serving the tools over the journal's server")
	} else {
		note(stderr, "mcp: serving the tools over an embedded runtime (start `stockade serve` to share it)")
	}
	t := &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}, MaxLineLength: mcpserver.MaxMessageBytes}
	path, err := journalPath(c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	if err := mcpserver.New(rt, mcpserver.Options{Journal: path}).Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return fail(stderr, spec.Wrap(spec.CodeStreamFailure, "mcp", err, "the MCP session on stdio"), 1)
	}
	return 0
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
