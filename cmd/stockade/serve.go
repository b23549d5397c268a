package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/netutil"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/sandboxflag"
	"github.com/stockade/stockade/mcpserver"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/tracing/exporter"
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
	metrics string        // "": no metrics endpoint; else its TCP address
	// mcp is the Streamable HTTP address of the MCP tools ("": none);
	// mcpToken the file of their bearer token ("": none, loopback only).
	mcp, mcpToken string
	pools         []stockade.PoolSpec
	refills       int // at least 1 (--pool-refills, default stockade.DefaultPoolRefills)
	// metricLabels are the sandbox label keys the usage metrics carry.
	metricLabels []string
	// usageEvery is the usage ledger's sampling interval (0: the default).
	usageEvery time.Duration
}

const serveUsage = "stockade serve [--socket PATH] [--retain D] [--metrics ADDR [--metrics-label KEY]...] [--usage-every D] [--mcp ADDR [--mcp-token FILE]] [--pool NAME=KEY=VALUE,...,size=N]... [--pool-refills N]"

func parseServe(g global, args []string) (command, error) {
	c := &serveCmd{g: g}
	fs := newFlags("serve", &c.g)
	fs.StringVar(&c.socket, "socket", "", "unix socket path (default $STOCKADE_SOCKET, else the journal's path with .sock)")
	fs.DurationVar(&c.retain, "retain", 0, "delete removed sandboxes and ended processes (events and recorded output) this long after they end (0: keep them)")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics over HTTP at this address (host:port; a bare :port is on loopback)")
	fs.StringVar(&c.mcp, "mcp", "", "serve the MCP tools over Streamable HTTP at this address (host:port; a bare :port is on loopback; elsewhere --mcp-token is required)")
	fs.StringVar(&c.mcpToken, "mcp-token", "", "a file (0600, this user's) holding the bearer token every MCP request must carry")
	fs.DurationVar(&c.usageEvery, "usage-every", 0, "sample each running sandbox's cgroup for the usage ledger this often (default 10s; negative: only at stops and when asked)")
	var labels multiFlag
	fs.Var(&labels, "metrics-label", "a sandbox label key the usage metrics are labelled by, beside the pool (repeatable; keys with few values only)")
	var pools multiFlag
	fs.Var(&pools, "pool", "a warm pool: NAME=KEY=VALUE,...,size=N (keys: image, cpus, memory, pids, network, user, size; repeatable)")
	refills := fs.Int("pool-refills", stockade.DefaultPoolRefills, "how many pooled sandboxes are made at once, across every pool")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("serve", pos, 0, serveUsage); err != nil {
		return nil, err
	}
	for _, k := range labels {
		if k == "" || strings.ContainsAny(k, "= ") {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "serve", "--metrics-label %q: want a label key (no '=' or space)", k)
		}
		c.metricLabels = append(c.metricLabels, k)
	}
	seen := map[string]bool{}
	for _, v := range pools {
		p, err := sandboxflag.Pool("serve", v)
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "serve", "--pool %s is given twice", p.Name)
		}
		seen[p.Name] = true
		c.pools = append(c.pools, p)
	}
	// 0 would mean the default to stockade.Options: refused rather than
	// read as "no refills", which no pool could live with.
	if c.refills = *refills; c.refills < 1 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "serve", "--pool-refills %d: at least one refill must be allowed", c.refills)
	}
	if c.retain < 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "serve", "--retain %v is negative", c.retain)
	}
	if c.metrics != "" {
		if c.metrics, err = metricsAddr(c.metrics); err != nil {
			return nil, err
		}
	}
	if c.mcp != "" {
		if c.mcp, err = listenAddr("--mcp", c.mcp); err != nil {
			return nil, err
		}
		if c.mcpToken == "" && !loopback(c.mcp) {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "serve", "--mcp %s is not a loopback address: give --mcp-token FILE (a 0600 file holding the token the clients are given) or a loopback address", c.mcp)
		}
	} else if c.mcpToken != "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "serve", "--mcp-token without --mcp: say where to serve the MCP tools")
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
	// The MCP token is read before anything is held: a bad one is the
	// operator's to fix, not a runtime opened for nothing. With none
	// given, one is made: a loopback port is open to every local user,
	// the unix socket only to this one.
	var token string
	if c.mcp != "" {
		var err error
		if c.mcpToken == "" {
			c.mcpToken, err = mcpserver.MakeToken(c.journal + ".mcp-token")
		}
		if err == nil {
			token, err = mcpserver.ReadToken(c.mcpToken)
		}
		if err != nil {
			return fail(stderr, err, 1)
		}
	}
	unmark, err := server.WriteMarker(c.journal)
	if err != nil {
		if !spec.IsCode(err, spec.CodeJournalLocked) && !spec.IsCode(err, spec.CodeInvalidArgument) {
			err = spec.Wrap(spec.CodeJournal, "serve", err, "writing the server's marker beside %s", c.journal)
		}
		return fail(stderr, err, 1)
	}
	defer unmark()
	// A command that took the journal just before the marker was written
	// holds it briefly: wait for it as long as commands wait for a server.
	traces, err := exporter.FromEnv(ctx)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer flushTraces(traces, 5*time.Second, log)
	if traces.On {
		note(stderr, "exporting traces to %s (OTEL_* environment)", traces.Describe())
	}
	rt, err := stockade.Open(ctx, stockade.Options{Journal: c.journal, Profile: c.g.profile, Logger: log, LockTimeout: serverWait,
		Pools: c.pools, PoolRefills: c.refills, MetricLabels: c.metricLabels, UsageEvery: c.usageEvery})
	if err != nil {
		return fail(stderr, err, 1)
	}
	lis, err := server.Listen(c.socket, log)
	if err != nil {
		_ = rt.Close() // the Listen error is the one reported
		return fail(stderr, err, 1)
	}
	srv := server.New(rt.Host(), server.Options{Logger: log})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	note(stderr, "serving journal %s on %s", c.journal, c.socket)
	if c.retain > 0 {
		go retainEvery(ctx, rt, c.retain, log)
	}
	var ms *http.Server
	if c.metrics != "" {
		if ms, err = serveMetrics(rt, c.metrics, log); err != nil {
			srv.Stop(0)
			_ = rt.Close() // the metrics error is the one reported
			return fail(stderr, err, 1)
		}
		note(stderr, "serving metrics on http://%s/metrics", ms.Addr)
	}
	var mh *http.Server
	if c.mcp != "" {
		if mh, err = serveMCP(rt.Host(), c.journal, c.mcp, token, log); err != nil {
			srv.Stop(0)
			if ms != nil {
				_ = ms.Close() // the MCP error is the one reported
			}
			_ = rt.Close() // likewise
			return fail(stderr, err, 1)
		}
		note(stderr, "serving MCP on http://%s/ (every request carries \"Authorization: Bearer\" and the token in %s)", mh.Addr, c.mcpToken)
	}

	code := 0
	select {
	case <-ctx.Done():
	case <-srv.ShutdownRequested():
		note(stderr, "shut down by a client: its sandboxes are stopped")
	case err := <-served:
		code = fail(stderr, err, 1)
	}
	srv.Stop(serveGrace)
	if ms != nil {
		_ = ms.Close() // scrapes in flight end with the server
	}
	if mh != nil {
		_ = mh.Close() // MCP calls in flight end with the server
	}
	if err := rt.Close(); err != nil {
		return fail(stderr, err, 1)
	}
	return code
}

// metricsAddr checks --metrics: host:port, a bare :port meaning loopback
// (metrics name no secrets, but nothing is exposed beyond the host unless
// asked).
func metricsAddr(a string) (string, error) { return listenAddr("--metrics", a) }

// listenAddr checks a flag's host:port; a bare :port is on loopback.
func listenAddr(flag, a string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", spec.Errorf(spec.CodeInvalidArgument, "serve", "%s %q is not host:port: %v", flag, a, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", spec.Errorf(spec.CodeInvalidArgument, "serve", "%s %q: port %q is not a number from 0 to 65535", flag, a, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// loopback reports whether a host:port is on a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveMCP listens on addr and serves rt's MCP tools over Streamable HTTP.
func serveMCP(rt host.Runtime, journal, addr, token string, log *slog.Logger) (*http.Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, spec.Wrap(spec.CodeConflict, "serve", err, "listening for MCP on %s", addr)
	}
	// Bounded: connections at once, the time to send a request, headers,
	// and an idle connection's life (a call may run long: no write
	// timeout; the exec and wait tools bound their own waits).
	hs := &http.Server{Addr: lis.Addr().String(), Handler: mcpserver.HTTPHandler(rt, mcpserver.Options{Journal: journal}, token),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	lis = netutil.LimitListener(lis, 256)
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("the MCP server stopped", "err", err)
		}
	}()
	return hs, nil
}

// serveMetrics listens on addr and serves rt's metrics at /metrics.
func serveMetrics(rt *stockade.Runtime, addr string, log *slog.Logger) (*http.Server, error) {
	m, err := rt.Metrics()
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, spec.Wrap(spec.CodeConflict, "serve", err, "listening for metrics on %s", addr)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	// Addr is the address bound (a :0 port chosen by the system).
	hs := &http.Server{Addr: lis.Addr().String(), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("the metrics server stopped", "err", err)
		}
	}()
	return hs, nil
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

// flushTraces exports the spans still buffered, bounded: a collector that
// does not answer never holds up an exit for long.
func flushTraces(s exporter.Setup, wait time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		log.Warn("the last spans could not be exported", "err", err)
	}
}
