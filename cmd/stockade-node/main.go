// Command stockade-node runs a stockade runtime as a Kubernetes node (see
// package kubenode); `stockade node` runs it. It is a program of its own
// because the Kubernetes client libraries it links initialise for tens of
// milliseconds at every start, a cost every other stockade command (an agent
// calls one per action) must not pay.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/sandboxflag"
	"github.com/stockade/stockade/kubenode"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/tracing/exporter"
)

// Usage is the command line, as `stockade node` shows it.
const usage = "stockade node --kubeconfig FILE [--name N] [--listen ADDR] [--address IP] [--tls-cert F --tls-key F] [--client-ca F] [--max-pods N] [--cpus N] [--memory Q] [--reserved cpu=N,memory=Q] [--pool NAME=KEY=VALUE,...,size=N]... [--socket PATH] [--journal F] [--profile P] [-v]"

// lockWait is how long the node waits for a journal another command holds
// briefly (as `stockade serve` does).
const lockWait = 30 * time.Second

// stopGrace is how long unary gRPC calls in flight may take once a stop is
// asked.
const stopGrace = 5 * time.Second

type options struct {
	journal, profile, socket string
	pools                    []stockade.PoolSpec
	cfg                      kubenode.Config
	level                    slog.Level
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = fmt.Fprintln(stderr, "usage: "+usage) // asked for: nowhere else to say it
		var h helpError
		if errors.As(err, &h) {
			_, _ = fmt.Fprint(stderr, h.flags)
		}
		return 0
	}
	if err != nil {
		return fail(stderr, err, 2)
	}
	return o.execute(ctx, stderr)
}

func parse(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.journal, "journal", "", "journal file (default $STOCKADE_JOURNAL, else under $XDG_STATE_HOME)")
	fs.StringVar(&o.profile, "profile", "", "preflight profile")
	fs.StringVar(&o.cfg.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the API server's address and this node's credentials (default $KUBECONFIG)")
	fs.StringVar(&o.cfg.Name, "name", "", "the node's name (default: the host name)")
	fs.StringVar(&o.cfg.Listen, "listen", ":10250", "the kubelet API's address (TLS)")
	fs.StringVar(&o.cfg.Address, "address", "", "the address the API server reaches the node at")
	fs.StringVar(&o.cfg.TLSCert, "tls-cert", "", "the kubelet API's serving certificate (default: self-signed at start)")
	fs.StringVar(&o.cfg.TLSKey, "tls-key", "", "its key")
	fs.StringVar(&o.cfg.ClientCA, "client-ca", "", "the CA of the API server's kubelet client certificate (default: the kubeconfig's CA)")
	fs.IntVar(&o.cfg.MaxPods, "max-pods", kubenode.DefaultMaxPods, "the node's pod capacity: the most sandboxes it runs")
	fs.Float64Var(&o.cfg.CPUs, "cpus", 0, "the CPUs the node offers pods (default: the host's; give its share when the host's kubelet offers them too)")
	memory := fs.String("memory", "", "the memory the node offers pods, a Kubernetes quantity such as 16Gi (default: the host's)")
	reserved := fs.String("reserved", "", "what pods may not have of it, as the kubelet's --system-reserved: cpu=N,memory=Q")
	fs.Func("pool", "a warm pool pods claim from when their spec has its key: NAME=KEY=VALUE,...,size=N (keys: image, cpus, memory, pids, network, user, size; repeatable)", func(v string) error {
		p, err := sandboxflag.Pool("node", v)
		if err != nil {
			return err
		}
		if err := kubenode.PoolLabelName(p.Name); err != nil {
			return err
		}
		// A pod's sandbox has the default network (none) and user: a
		// pool of another could never be claimed by a pod.
		if def := spec.DefaultPolicy(); p.Sandbox.Policy.Network != def.Network || p.Sandbox.Policy.User != def.User {
			return spec.Errorf(spec.CodeInvalidArgument, "node", "--pool %s: network and user are a pod's defaults (isolated, %d:%d) on a node: a pool of another network or user would never be claimed", p.Name, def.User.UID, def.User.GID)
		}
		if slices.ContainsFunc(o.pools, func(q stockade.PoolSpec) bool { return q.Name == p.Name }) {
			return spec.Errorf(spec.CodeInvalidArgument, "node", "--pool %s is given twice", p.Name)
		}
		o.pools = append(o.pools, p)
		return nil
	})
	fs.StringVar(&o.socket, "socket", "", "the gRPC socket (default $STOCKADE_SOCKET, else the journal's path with .sock)")
	verbose := fs.Bool("v", false, "log each pod's changes as well as warnings")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			var b strings.Builder
			fs.SetOutput(&b)
			fs.PrintDefaults()
			return nil, helpError{flags: b.String()}
		}
		return nil, spec.Wrap(spec.CodeInvalidArgument, "node", err, "usage: %s", usage)
	}
	if fs.NArg() > 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "node", "unexpected argument %q (usage: %s)", fs.Arg(0), usage)
	}
	if o.profile != "" {
		if _, err := profile.Lookup(o.profile); err != nil {
			return nil, err
		}
	}
	if o.cfg.Kubeconfig == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "node", "no kubeconfig: give --kubeconfig FILE or set KUBECONFIG")
	}
	if (o.cfg.TLSCert == "") != (o.cfg.TLSKey == "") {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "node", "--tls-cert and --tls-key go together")
	}
	if o.cfg.CPUs < 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "node", "--cpus %g: not negative", o.cfg.CPUs)
	}
	if *memory != "" {
		q, err := quantity("--memory", *memory)
		if err != nil {
			return nil, err
		}
		o.cfg.Memory = q
	}
	if err := parseReserved(*reserved, &o.cfg); err != nil {
		return nil, err
	}
	if err := o.cfg.CheckResources(); err != nil {
		return nil, err
	}
	if o.cfg.MaxPods < 1 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "node", "--max-pods %d: at least 1", o.cfg.MaxPods)
	}
	o.level = slog.LevelWarn
	if *verbose {
		o.level = slog.LevelInfo
	}
	if o.journal == "" {
		p, err := statedir.DefaultJournal()
		if err != nil {
			return nil, err
		}
		o.journal = p
	}
	if o.socket == "" {
		o.socket = server.SocketPath(o.journal)
	}
	if err := server.CheckSocketPath(o.socket); err != nil {
		return nil, err
	}
	return o, nil
}

// execute opens the runtime (recovery re-adopts the node's sandboxes),
// serves the journal's gRPC socket (so every stockade command works on the
// node's journal while it runs), and runs the node until SIGTERM/SIGINT.
// The sandboxes stay up (kept): the next start on this journal takes them
// back.
func (o *options) execute(ctx context.Context, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level}))
	unmark, err := server.WriteMarker(o.journal)
	if err != nil {
		if !spec.IsCode(err, spec.CodeJournalLocked) {
			err = spec.Wrap(spec.CodeJournal, "node", err, "writing the server's marker beside %s", o.journal)
		}
		return fail(stderr, err, 1)
	}
	defer unmark()
	traces, err := exporter.FromEnv(ctx)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := traces.Shutdown(fctx); err != nil {
			log.Warn("the last spans could not be exported", "err", err)
		}
	}()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: o.journal, Profile: o.profile, Logger: log, LockTimeout: lockWait, Pools: o.pools})
	if err != nil {
		return fail(stderr, err, 1)
	}
	lis, err := server.Listen(o.socket, log)
	if err != nil {
		_ = rt.Close() // the Listen error is the one reported
		return fail(stderr, err, 1)
	}
	srv := server.New(rt.Host(), server.Options{Logger: log})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	o.cfg.Runtime, o.cfg.Logger, o.cfg.StateDir = rt, log, filepath.Dir(o.journal)
	o.cfg.Ready = func() {
		note(stderr, "node %s ready: journal %s (owner %s), kubelet API on %s, socket %s", o.cfg.Name, o.journal, rt.Owner(), o.cfg.Listen, o.socket)
	}
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- kubenode.Run(nctx, o.cfg) }()
	code := 0
	select {
	case err := <-ran:
		if err != nil {
			code = fail(stderr, err, 1)
		}
	case err := <-served:
		code = fail(stderr, err, 1)
		cancel()
		if err := <-ran; err != nil {
			note(stderr, "the node also stopped: %v", err)
		}
	}
	srv.Stop(stopGrace)
	if err := rt.Close(); err != nil {
		return fail(stderr, err, 1)
	}
	return code
}

// quantity is a Kubernetes quantity of bytes given to a flag.
func quantity(flagName, v string) (int64, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return 0, spec.Errorf(spec.CodeInvalidArgument, "node", "%s %q: a positive quantity such as 512Mi or 16Gi", flagName, v)
	}
	return q.Value(), nil
}

// parseReserved reads --reserved cpu=N,memory=Q.
func parseReserved(v string, cfg *kubenode.Config) error {
	if v == "" {
		return nil
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return spec.Errorf(spec.CodeInvalidArgument, "node", "--reserved %q: each entry is name=quantity (cpu=1,memory=2Gi)", v)
		case k == "cpu":
			q, err := resource.ParseQuantity(val)
			if err != nil || q.Sign() < 0 {
				return spec.Errorf(spec.CodeInvalidArgument, "node", "--reserved cpu=%q: a CPU quantity such as 500m or 2", val)
			}
			cfg.ReservedCPUs = float64(q.MilliValue()) / 1000
		case k == "memory":
			q, err := quantity("--reserved memory=", val)
			if err != nil {
				return err
			}
			cfg.ReservedMemory = q
		default:
			return spec.Errorf(spec.CodeInvalidArgument, "node", "--reserved %q: %q is not reservable here (cpu, memory)", v, k)
		}
	}
	return nil
}

// helpError is -h: flag.ErrHelp with every flag's description.
type helpError struct{ flags string }

func (helpError) Error() string { return flag.ErrHelp.Error() }
func (helpError) Unwrap() error { return flag.ErrHelp }

func fail(stderr io.Writer, err error, code int) int {
	note(stderr, "%s", strings.ReplaceAll(err.Error(), "\n", " "))
	return code
}

func note(stderr io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(stderr, "stockade: "+format+"\n", args...) // nowhere left to report a failing stderr
}
