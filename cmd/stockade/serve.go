package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
)

// serveGrace is how long unary calls in flight may take to finish once a
// stop is asked; streams are cancelled after it (attached processes run on).
const serveGrace = 5 * time.Second

// serveCmd is `stockade serve [--socket PATH]`: the runtime as a
// long-lived process with the gRPC API on a unix socket.
type serveCmd struct {
	g       global
	journal string
	socket  string
	retain  time.Duration // 0: keep every ended entity
}

func parseServe(g global, args []string) (command, error) {
	c := &serveCmd{g: g}
	fs := newFlags("serve", &c.g)
	fs.StringVar(&c.socket, "socket", "", "unix socket path (default $STOCKADE_SOCKET, else the journal's path with .sock)")
	fs.DurationVar(&c.retain, "retain", 0, "delete removed sandboxes and ended processes (events and recorded output) this long after they end (0: keep them)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("serve", pos, 0, "stockade serve [--socket PATH] [--retain D]"); err != nil {
		return nil, err
	}
	if c.retain < 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "serve", "--retain %v is negative", c.retain)
	}
	if c.journal, err = journalPath(c.g); err != nil {
		return nil, err
	}
	if c.socket == "" {
		c.socket = server.SocketPath(c.journal)
	}
	// The path is judged before the journal is opened: a socket that cannot
	// be bound is a usage error, not a runtime held for nothing.
	if err := server.CheckSocketPath(c.socket); err != nil {
		return nil, err
	}
	return c, nil
}

// execute takes the journal lock (Open, which recovers), then replaces a
// stale socket and listens; on SIGTERM or SIGINT (ctx) it stops accepting,
// lets unary calls finish for serveGrace, cancels the rest and closes the
// runtime, leaving kept sandboxes and attached processes running.
func (c *serveCmd) execute(ctx context.Context, _ io.Reader, _, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Before anything can be asked of the server: a SIGUSR1 left to its
	// default action would kill it.
	stats := make(chan os.Signal, 1)
	signal.Notify(stats, syscall.SIGUSR1)
	defer signal.Stop(stats)
	go func() {
		for range stats {
			_, _ = fmt.Fprintln(stderr, processStats()) // asked for on stderr: nowhere else to say it failed
		}
	}()
	// The marker goes first: a command that runs while this server holds
	// the journal and recovers (its socket not yet answering) waits for
	// the socket rather than failing journal_locked. The socket is opened
	// only once recovery is done, so no call is answered before.
	unmark, err := server.WriteMarker(c.journal)
	if err != nil {
		if !spec.IsCode(err, spec.CodeJournalLocked) {
			err = spec.Wrap(spec.CodeJournal, "serve", err, "writing the server's marker beside %s", c.journal)
		}
		return fail(stderr, err, 1)
	}
	defer unmark()
	// A command that took the journal just before the marker was written
	// holds it briefly: wait for it as long as commands wait for a server.
	rt, err := stockade.Open(ctx, stockade.Options{Journal: c.journal, Profile: c.g.profile, Logger: log, LockTimeout: serverWait})
	if err != nil {
		return fail(stderr, err, 1)
	}
	lis, err := server.Listen(c.socket, log)
	if err != nil {
		_ = rt.Close() // the Listen error is the one reported
		return fail(stderr, err, 1)
	}
	srv := server.New(rt, server.Options{Logger: log, Profile: c.g.profile})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	note(stderr, "serving journal %s on %s", c.journal, c.socket)
	if c.retain > 0 {
		go retainEvery(ctx, rt, c.retain, log)
	}

	code := 0
	select {
	case <-ctx.Done():
	case err := <-served:
		code = fail(stderr, err, 1)
	}
	srv.Stop(serveGrace)
	if err := rt.Close(); err != nil {
		return fail(stderr, err, 1)
	}
	return code
}

// retainEvery deletes what ended more than age ago, at start and then a
// tenth of age apart (at most hourly), until ctx ends: a long-lived server
// keeps its journal and recordings bounded.
func retainEvery(ctx context.Context, rt *stockade.Runtime, age time.Duration, log *slog.Logger) {
	every := min(max(age/10, time.Minute), time.Hour)
	for {
		if n, err := rt.Retain(ctx, age); err != nil && ctx.Err() == nil {
			log.Warn("retention failed", "err", err)
		} else if n > 0 {
			log.Info("retention deleted ended entities", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// processStats is the line SIGUSR1 makes a server print: what an operator
// (or the soak) compares over a server's life to see a leak. The heap is
// read after a collection, so that two lines compare what is live.
func processStats() string {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return fmt.Sprintf("stockade: stats goroutines=%d heap_alloc=%d heap_inuse=%d heap_objects=%d fds=%d gc=%d",
		runtime.NumGoroutine(), m.HeapAlloc, m.HeapInuse, m.HeapObjects, fds, m.NumGC)
}
