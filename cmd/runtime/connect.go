package main

import (
	"context"
	"os"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
)

// socketFor is where a server of the journal listens: $STOCKADE_SOCKET, else
// beside the journal (journal.db → journal.sock).
func socketFor(g global) (string, error) {
	if s := os.Getenv(server.SocketEnv); s != "" {
		return s, nil
	}
	path, err := journalPath(g)
	if err != nil {
		return "", err
	}
	return server.SocketPath(path), nil
}

// connect returns the runtime a command works through: the server of the
// journal when its socket answers, else an embedded runtime holding the
// journal for the command's duration (which recovers first, so a kept
// sandbox is re-adopted). served says which.
func connect(ctx context.Context, g global) (rt host.Runtime, served bool, err error) {
	if c := dial(g); c != nil {
		return c, true, nil
	}
	e, err := stockade.Open(ctx, stockade.Options{Journal: g.journal, Profile: g.profile})
	if err != nil {
		return nil, false, err
	}
	return e.Host(), false, nil
}

// dial returns a client of the journal's server, or nil when none answers.
func dial(g global) *client.Client {
	sock, err := socketFor(g)
	if err != nil {
		return nil
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil
	}
	c, err := client.Dial(sock)
	if err != nil {
		return nil
	}
	return c
}

// serverAnswers reports whether the journal's server answers.
func serverAnswers(g global) bool {
	c := dial(g)
	if c == nil {
		return false
	}
	c.Close()
	return true
}

// openSandbox connects (see connect) and finds a live sandbox. The caller
// closes the runtime.
func openSandbox(ctx context.Context, g global, id string) (host.Runtime, host.Sandbox, bool, error) {
	rt, served, err := connect(ctx, g)
	if err != nil {
		return nil, nil, false, err
	}
	sb, err := rt.Sandbox(ctx, id)
	if err != nil {
		rt.Close()
		return nil, nil, false, err
	}
	return rt, sb, served, nil
}

// detacher is a served sandbox: it can start a process its caller does not
// wait for (its runtime lives on to see it end).
type detacher interface {
	StartDetached(ctx context.Context, p spec.Process) (string, error)
}
