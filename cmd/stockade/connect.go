package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/tracing/exporter"
)

// socketFor is where a server of the journal listens: $STOCKADE_SOCKET, else
// beside the journal (journal.db → journal.sock).
func socketFor(g global) (string, error) {
	if s := os.Getenv(statedir.SocketEnv); s != "" {
		return s, nil
	}
	path, err := journalPath(g)
	if err != nil {
		return "", err
	}
	return statedir.ServedSocket(path)
}

// connect returns the runtime a command works through: the server of the
// journal when its socket answers, else an embedded runtime holding the
// journal for the command's duration (which recovers first, so a kept
// sandbox is re-adopted). served says which.
func connect(ctx context.Context, g global) (rt host.Runtime, served bool, err error) {
	if c := dial(g); c != nil {
		return c, true, nil
	}
	embeddedTraces(ctx)
	e, err := stockade.Open(ctx, stockade.Options{Journal: g.journal, Profile: g.profile})
	if spec.IsCode(err, spec.CodeJournalLocked) {
		// A server may have taken the journal since the dial: wait
		// for it (dial does only when its marker says so).
		if c := dial(g); c != nil {
			return c, true, nil
		}
	}
	if err != nil {
		return nil, false, err
	}
	return e.Host(), false, nil
}

// serverWait bounds the wait for a server that holds the journal but does
// not answer yet (it is recovering).
const serverWait = 30 * time.Second

// dial returns a client of the journal's server, or nil when none answers.
// When the socket is silent but the journal's server marker names a live
// process, a server holds the journal and is still recovering: dial waits
// for its socket (up to serverWait, saying so once on stderr) rather than
// let the command open the journal itself and fail journal_locked.
func dial(g global) *client.Client {
	sock, err := socketFor(g)
	if err != nil {
		return nil
	}
	if c := dialOnce(sock); c != nil {
		return c
	}
	path, err := journalPath(g)
	if err != nil {
		return nil
	}
	pid := server.MarkerPID(path)
	if pid == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "stockade: the server (pid %d) holds the journal and is recovering; waiting up to %s for %s\n", pid, serverWait, sock)
	deadline := time.Now().Add(serverWait)
	for time.Now().Before(deadline) && server.MarkerPID(path) == pid {
		time.Sleep(100 * time.Millisecond)
		if c := dialOnce(sock); c != nil {
			return c
		}
	}
	return nil
}

func dialOnce(sock string) *client.Client {
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil
	}
	c, err := client.Dial(sock)
	if err != nil {
		if spec.IsCode(err, spec.CodeInvalidArgument) {
			// Refused, not absent (a directory another user owns):
			// the command goes on without it, and says why.
			fmt.Fprintf(os.Stderr, "stockade: not using the server's socket: %v\n", err)
		}
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
	_ = c.Close() // only asked whether it answers
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
		_ = rt.Close() // err is the one reported
		return nil, nil, false, err
	}
	return rt, sb, served, nil
}

// detacher is a served sandbox: it can start a process its caller does not
// wait for (its runtime lives on to see it end).
type detacher interface {
	StartDetached(ctx context.Context, p spec.Process) (string, error)
}

// cliTraces is the trace export an embedded runtime's command set up from
// the OTEL_* environment (main flushes it at the exit).
var cliTraces exporter.Setup

// embeddedTraces sets up trace export for an embedded runtime; an
// environment it cannot use turns tracing off with a warning, never the
// command (the OpenTelemetry specification's rule for a bad variable).
func embeddedTraces(ctx context.Context) {
	if cliTraces.On {
		return
	}
	s, err := exporter.FromEnv(ctx)
	if err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "stockade: tracing is off: %v\n", err)
		return
	}
	cliTraces = s
}
