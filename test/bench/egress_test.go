package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// The allowlist network's cost, each against the open network in the same
// run, alternating: a 256 MiB download through the proxy, a small request's
// round trip (the proxy's added latency), and a sandbox's create.
//
//	go test -run '^$' -bench BenchmarkEgress -benchtime 5x ./test/bench/

// egressPair is an open and an allowlist sandbox of one runtime, and the
// host server both reach.
type egressPair struct {
	e          *testkit.APIEnv
	open, allo *stockade.Sandbox
	target     string
	srv        *testkit.OutsideServer
}

func newEgressPair(b *testing.B) *egressPair {
	b.Helper()
	e := testkit.NewAPI(b, stockade.Options{})
	srv := testkit.StartOutside(b)
	target := fmt.Sprintf("%s:%d", testkit.BridgeGateway(b, dockertest.Client(b)), srv.Port)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mk := func(p spec.Policy) *stockade.Sandbox {
		p.MemoryBytes = 512 << 20
		sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: p, Lifetime: spec.Kept})
		if err != nil {
			b.Fatalf("create: %v", err)
		}
		return sb
	}
	open := testkit.SmallPolicy()
	open.Network = spec.NetworkOpen
	return &egressPair{e: e, open: mk(open), allo: mk(testkit.AllowlistPolicy(target)), target: target, srv: srv}
}

// fetch returns sh fetching path from the target into /dev/null, directly
// or through the proxy's CONNECT tunnel, n times.
// The responses go to /dev/null; the server's own counts (requests
// answered, bytes written) prove each fetch reached it whole, so a refusal
// is never taken for a fast answer.
func (p *egressPair) fetch(proxied bool, path string, n int) string {
	req := fmt.Sprintf(`GET %s HTTP/1.0\r\n\r\n`, path)
	one := fmt.Sprintf(`printf '%s' | nc %s > /dev/null`, req, strings.Replace(p.target, ":", " ", 1))
	if proxied {
		one = fmt.Sprintf(`printf 'CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\n%[2]s' | nc "$ph" "$pp" > /dev/null`, p.target, req)
	}
	return testkit.ProxyScript + fmt.Sprintf(`i=0; while [ $i -lt %d ]; do %s; i=$((i+1)); done`, n, one)
}

// timed runs script and checks the server answered n requests with at
// least bytes bytes in all.
func (p *egressPair) timed(b *testing.B, sb *stockade.Sandbox, script string, n, bytes int64) time.Duration {
	b.Helper()
	hits, sent := p.srv.Hits.Load(), p.srv.Sent.Load()
	start := time.Now()
	_, errOut, res, err := testkit.RunOut(b, sb, spec.Process{Argv: []string{"sh", "-c", script}})
	d := time.Since(start)
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("%s: %+v %v %s", script, res, err, errOut)
	}
	if h, s := p.srv.Hits.Load()-hits, p.srv.Sent.Load()-sent; h != n || s < bytes {
		b.Fatalf("%s: the server answered %d requests with %d bytes, want %d and at least %d", script, h, s, n, bytes)
	}
	return d
}

func BenchmarkEgressDownload256MiB(b *testing.B) {
	p := newEgressPair(b)
	const size = 256 << 20
	var open, proxied time.Duration
	for i := 0; i < b.N; i++ {
		// Alternate which goes first: the page cache and the CPU's state
		// favour neither.
		if i%2 == 0 {
			open += p.timed(b, p.open, p.fetch(false, fmt.Sprintf("/bytes/%d", size), 1), 1, size)
			proxied += p.timed(b, p.allo, p.fetch(true, fmt.Sprintf("/bytes/%d", size), 1), 1, size)
		} else {
			proxied += p.timed(b, p.allo, p.fetch(true, fmt.Sprintf("/bytes/%d", size), 1), 1, size)
			open += p.timed(b, p.open, p.fetch(false, fmt.Sprintf("/bytes/%d", size), 1), 1, size)
		}
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
	b.ReportMetric(mbps(open), "open-MiB/s")
	b.ReportMetric(mbps(proxied), "proxied-MiB/s")
	b.ReportMetric(mbps(proxied)/mbps(open), "proxied/open")
}

// BenchmarkEgressLatency: each sample is 100 small requests in one
// process (so the process's own start is spread thin), open and proxied
// back to back in alternating order; the paired difference per request is
// the proxy's added latency (a CONNECT, its decision, a second dial). The
// median of the samples is reported.
func BenchmarkEgressLatency(b *testing.B) {
	p := newEgressPair(b)
	const n = 100
	var open, proxied, added []time.Duration
	for i := 0; i < b.N; i++ {
		var o, x time.Duration
		if i%2 == 0 {
			o = p.timed(b, p.open, p.fetch(false, "/", n), n, 1) / n
			x = p.timed(b, p.allo, p.fetch(true, "/", n), n, 1) / n
		} else {
			x = p.timed(b, p.allo, p.fetch(true, "/", n), n, 1) / n
			o = p.timed(b, p.open, p.fetch(false, "/", n), n, 1) / n
		}
		open, proxied, added = append(open, o), append(proxied, x), append(added, x-o)
	}
	med := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	b.ReportMetric(float64(med(open).Microseconds()), "open-µs/req")
	b.ReportMetric(float64(med(proxied).Microseconds()), "proxied-µs/req")
	b.ReportMetric(float64(med(added).Microseconds()), "added-µs/req")
}

func BenchmarkEgressCreate(b *testing.B) {
	e := testkit.NewAPI(b, stockade.Options{})
	target := fmt.Sprintf("%s:80", testkit.BridgeGateway(b, dockertest.Client(b)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	open := testkit.SmallPolicy()
	open.Network = spec.NetworkOpen
	mk := func(p spec.Policy) time.Duration {
		start := time.Now()
		sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: p, Lifetime: spec.Kept})
		if err != nil {
			b.Fatalf("create: %v", err)
		}
		d := time.Since(start)
		if err := sb.Remove(ctx); err != nil {
			b.Fatalf("remove: %v", err)
		}
		return d
	}
	mk(testkit.AllowlistPolicy(target)) // the egress image's import and the outside network, once
	var o, a []time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			o = append(o, mk(open))
			a = append(a, mk(testkit.AllowlistPolicy(target)))
		} else {
			a = append(a, mk(testkit.AllowlistPolicy(target)))
			o = append(o, mk(open))
		}
	}
	slices.Sort(o)
	slices.Sort(a)
	b.ReportMetric(float64(o[len(o)/2].Milliseconds()), "open-ms")
	b.ReportMetric(float64(a[len(a)/2].Milliseconds()), "allowlist-ms")
	b.ReportMetric(float64(a[len(a)/2])/float64(o[len(o)/2]), "allowlist/open")
}
