package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/stockade/stockade/spec"
)

// serve is `stockade-egress serve`: the proxy, until SIGTERM or SIGINT.
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	listen := fs.String("listen", "", "TCP `ADDR:PORT` the proxy listens on")
	control := fs.String("control", "", "unix socket `PATH` for the runtime's control link")
	rulesText := fs.String("rules", "", "comma-separated egress `RULES` in force from the start (none: deny everything)")
	version := fs.Uint64("rules-version", 0, "the version of --rules")
	maxConns := fs.Int("max-conns", defaultMaxConns, "client connections served at once; more are answered 503")
	selfText := fs.String("host", "", "comma-separated `ADDRS` of the host itself, which only a rule naming the address admits")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 || *listen == "" || *control == "" || *maxConns < 1 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	rules, err := spec.ParseEgressRules(*rulesText)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-egress: %v\n", err)
		return 2
	}
	var self []netip.Addr
	for f := range strings.SplitSeq(*selfText, ",") {
		if f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" {
			fmt.Fprintf(os.Stderr, "stockade-egress: --host: %q is not an address without a zone\n", f)
			return 2
		}
		self = append(self, a)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// One P: the relay's work is the kernel's (splice), the Go side
		// only waits for readiness. With more, every wakeup also wakes an
		// idle P that spins looking for work (futex, nanosleep, epoll
		// polls), CPU taken from the connections on a small machine.
		runtime.GOMAXPROCS(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	l, err := listenClients(*listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-egress: %v\n", err)
		return 1
	}
	cl, err := listenControl(*control)
	if err != nil {
		_ = l.Close()
		fmt.Fprintf(os.Stderr, "stockade-egress: control socket: %v\n", err)
		return 1
	}
	p := newProxy(*maxConns, *version, rules, os.Stderr)
	p.setRules(*version, rules, self)
	go p.serve(l)
	go p.serveControl(cl)
	p.logger.Printf("serving on %s, control %s, rules version %d (%d rules)", l.Addr(), *control, *version, len(rules))

	<-ctx.Done()
	_ = l.Close()
	_ = cl.Close()
	p.shutdown()
	p.logger.Printf("stopped")
	return 0
}
