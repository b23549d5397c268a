package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade"
	clientpkg "github.com/stockade/stockade/client"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// The allowlist network against the real daemon. There is no internet
// here: the "outside" is HTTP servers of the test on the host, reached at
// the default bridge's gateway address.

// outsideServer is an HTTP server on every host address: GET / answers
// "hello <port>", GET /bytes/N answers N bytes.
type outsideServer struct {
	port int
	hits atomic.Int64
	// leaked counts requests that arrived with proxy credentials (the
	// proxy must strip them).
	leaked atomic.Int64
	// sent counts the body bytes written.
	sent atomic.Int64
}

func startOutside(t testing.TB) *outsideServer {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &outsideServer{port: ln.Addr().(*net.TCPAddr).Port}
	block := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if r.Header.Get("Proxy-Authorization") != "" {
			s.leaked.Add(1)
		}
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			size, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			for size > 0 {
				k := min(size, int64(len(block)))
				n, err := w.Write(block[:k])
				s.sent.Add(int64(n))
				if err != nil {
					return
				}
				size -= k
			}
			return
		}
		n, _ := fmt.Fprintf(w, "hello %d\n", s.port)
		s.sent.Add(int64(n))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
	})
	return s
}

// bridgeGateway is the default bridge's gateway: the host, as containers
// see it.
func bridgeGateway(t testing.TB, cli *client.Client) string {
	t.Helper()
	n, err := cli.NetworkInspect(context.Background(), "bridge", network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.IPAM.Config {
		if c.Gateway != "" {
			return c.Gateway
		}
		// Engine 20.10 leaves the default bridge's Gateway empty: the
		// bridge holds its subnet's first address.
		if p, err := netip.ParsePrefix(c.Subnet); err == nil && p.Addr().Is4() {
			return p.Masked().Addr().Next().String()
		}
	}
	t.Fatal("the default bridge has no gateway")
	return ""
}

// hostAddress is one of the host's own IPv4 addresses that is neither
// loopback nor a Docker bridge's (its primary address, where it has one).
func hostAddress(t testing.TB) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 || i.Flags&net.FlagUp == 0 || strings.HasPrefix(i.Name, "docker") || strings.HasPrefix(i.Name, "br-") || strings.HasPrefix(i.Name, "veth") {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return ""
}

// proxyScript is sh that splits $HTTP_PROXY (http://user@ip:port) into $ph
// and $pp, and makes $auth, the Basic credentials of its user (the process
// id, which the proxy records), as a proxy client such as curl sends them.
const proxyScript = `p=${HTTP_PROXY#*@}; ph=${p%:*}; pp=${p##*:}; u=${HTTP_PROXY#http://}; u=${u%%@*}; auth=$(printf '%s:' "$u" | base64); `

// connectVia returns sh that asks the proxy to CONNECT to target and sends
// a GET through the tunnel; its output is the proxy's answer and, when
// admitted, the server's.
func connectVia(target string) string {
	return proxyScript + fmt.Sprintf(`printf 'CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\nProxy-Authorization: Basic %%s\r\n\r\nGET / HTTP/1.1\r\nHost: %[1]s\r\nConnection: close\r\n\r\n' "$auth" | nc -w 5 "$ph" "$pp"`, target)
}

// getVia returns sh that sends a plain-HTTP proxy request for url.
func getVia(url string) string {
	return proxyScript + fmt.Sprintf(`printf 'GET %s HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic %%s\r\nConnection: close\r\n\r\n' "$auth" | nc -w 5 "$ph" "$pp"`, url)
}

func allowlistPolicy(rules ...string) spec.Policy {
	p := smallPolicy()
	p.Network = spec.NetworkAllowlist
	for _, r := range rules {
		rule, err := spec.ParseEgressRule(r)
		if err != nil {
			panic(err)
		}
		p.Egress = append(p.Egress, rule)
	}
	return p
}

func sh(t *testing.T, sb *stockade.Sandbox, script string) (string, spec.Result) {
	t.Helper()
	out, errOut, res, err := runOut(t, sb, spec.Process{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return out + errOut, res
}

func decisions(t *testing.T, rt *stockade.Runtime, id string) []egress.Decision {
	t.Helper()
	var ds []egress.Decision
	if err := rt.Egress(id, func(d egress.Decision) error { ds = append(ds, d); return nil }); err != nil {
		t.Fatal(err)
	}
	return ds
}

// waitDecision polls the decision log (the proxy reports a connection's
// decision when it ends, the runtime records it off the mailbox) for one
// that matches.
func waitDecision(t *testing.T, read func() []egress.Decision, what string, match func(egress.Decision) bool) egress.Decision {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds := read()
		for _, d := range ds {
			if match(d) {
				return d
			}
		}
		if time.Now().After(deadline) {
			js, _ := json.MarshalIndent(ds, "", " ")
			t.Fatalf("no decision %s recorded; have:\n%s", what, js)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestEgressAllowlist(t *testing.T) {
	e := newAPI(t, stockade.Options{})
	gw := bridgeGateway(t, e.cli)
	allowed, other := startOutside(t), startOutside(t)
	allowedTarget := fmt.Sprintf("%s:%d", gw, allowed.port)
	otherTarget := fmt.Sprintf("%s:%d", gw, other.port)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := e.rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: e.image, Policy: allowlistPolicy(allowedTarget), Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	read := func() []egress.Decision { return decisions(t, e.rt, sb.ID()) }

	// The environment names the proxy, per process, with the process id as
	// its user; the container's own environment stays the seed's.
	out, _ := sh(t, sb, `env | grep -i _proxy= | sort`)
	for _, k := range []string{"HTTP_PROXY=http://", "HTTPS_PROXY=http://", "NO_PROXY=", "http_proxy=http://", "https_proxy=http://", "no_proxy="} {
		if !strings.Contains(out, k) {
			t.Errorf("process environment lacks %s:\n%s", k, out)
		}
	}

	t.Run("allowed CONNECT", func(t *testing.T) {
		out, _ := sh(t, sb, connectVia(allowedTarget))
		if !strings.Contains(out, " 200 ") || !strings.Contains(out, fmt.Sprintf("hello %d", allowed.port)) {
			t.Fatalf("CONNECT %s through the proxy:\n%s", allowedTarget, out)
		}
		d := waitDecision(t, read, "allow "+allowedTarget, func(d egress.Decision) bool {
			return d.Verdict == "allow" && d.Method == "CONNECT" && d.Port == uint16(allowed.port) && d.Down > 0
		})
		if d.Process == "" || d.Addr == "" || d.Rule == "" || d.Up == 0 {
			t.Errorf("allow decision lacks process, address, rule or bytes: %+v", d)
		}
	})
	t.Run("allowed plain HTTP", func(t *testing.T) {
		out, _ := sh(t, sb, getVia("http://"+allowedTarget+"/"))
		if !strings.Contains(out, fmt.Sprintf("hello %d", allowed.port)) {
			t.Fatalf("GET through the proxy:\n%s", out)
		}
		if n := allowed.leaked.Load(); n != 0 {
			t.Errorf("%d requests reached the server with the proxy's credentials", n)
		}
		waitDecision(t, read, "allow GET", func(d egress.Decision) bool {
			return d.Verdict == "allow" && d.Method == "GET" && d.Process != "" && d.Down > 0
		})
	})
	refused := []struct{ name, target, reason string }{
		{"another port", otherTarget, ""},
		{"another address", "192.0.2.10:80", ""},
		{"the metadata address", "169.254.169.254:80", ""},
	}
	for _, tc := range refused {
		t.Run("refused "+tc.name, func(t *testing.T) {
			out, _ := sh(t, sb, connectVia(tc.target))
			if !strings.Contains(out, " 403 ") || strings.Contains(out, "hello") {
				t.Fatalf("CONNECT %s was not refused:\n%s", tc.target, out)
			}
			host, port, _ := net.SplitHostPort(tc.target)
			waitDecision(t, read, "deny "+tc.target, func(d egress.Decision) bool {
				return d.Verdict == "deny" && d.Host == host && strconv.Itoa(int(d.Port)) == port && d.Reason != ""
			})
		})
	}
	if other.hits.Load() != 0 {
		t.Errorf("the refused server was reached %d times", other.hits.Load())
	}

	// Nothing but the proxy has a route: raw TCP to the allowed address
	// and port, the internal network's gateway address, the host's own
	// address, UDP to the host (DNS is TestHostileNetwork's, with a
	// listener on port 53).
	hits := allowed.hits.Load()
	st, err := sb.State(ctx)
	if err != nil || st.Created == nil || st.Created.Network == "" {
		t.Fatalf("state: %+v %v", st, err)
	}
	n, err := e.cli.NetworkInspect(ctx, st.Created.Network, network.InspectOptions{})
	if err != nil || len(n.IPAM.Config) != 1 || !n.Internal {
		t.Fatalf("the sandbox's network: %+v %v", n, err)
	}
	subnet := netip.MustParsePrefix(n.IPAM.Config[0].Subnet)
	probes := []string{
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, gw, allowed.port),
		// The internal network's gateway address, which the host would
		// hold but for inhibit_ipv4.
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, subnet.Addr().Next(), allowed.port),
	}
	if ha := hostAddress(t); ha != "" {
		probes = append(probes, fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, ha, allowed.port))
	}
	for _, p := range probes {
		if out, _ := sh(t, sb, p); strings.Contains(out, "hello") {
			t.Errorf("bypassing the proxy reached the server: %s\n%s", p, out)
		}
	}
	if n := allowed.hits.Load(); n != hits {
		t.Errorf("raw TCP reached the allowed server (%d hits)", n-hits)
	}
	udp, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = udp.Close() }()
	uport := udp.LocalAddr().(*net.UDPAddr).Port
	// busybox's nc has no UDP; its tftp sends a datagram (a read request)
	// to any host and port. The same probe from an open sandbox does reach
	// the listener: the refusal below is the network's, not the probe's.
	udpProbe := fmt.Sprintf(`timeout 3 tftp -g -r leak -l /tmp/leak %s %d; true`, gw, uport)
	openPol := smallPolicy()
	openPol.Network = spec.NetworkOpen
	control, err := e.rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: e.image, Policy: openPol, Lifetime: spec.OneShot})
	if err != nil {
		t.Fatalf("create the open control sandbox: %v", err)
	}
	sh(t, control, udpProbe)
	_ = udp.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := udp.ReadFrom(make([]byte, 512)); err != nil {
		t.Fatalf("the UDP probe from an open sandbox did not reach the host (%v): the probe proves nothing", err)
	}
	if err := control.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	// Drain the probe's retries before the allowlist sandbox tries.
	for {
		_ = udp.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, _, err := udp.ReadFrom(make([]byte, 512)); err != nil {
			break
		}
	}
	sh(t, sb, udpProbe)
	_ = udp.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, from, err := udp.ReadFrom(make([]byte, 512)); err == nil {
		t.Errorf("a UDP datagram of %d bytes from %v reached the host from the allowlist sandbox", n, from)
	}

	// A policy change on the running sandbox: journaled, in force at once.
	rule, _ := spec.ParseEgressRule(otherTarget)
	if err := sb.SetEgress(ctx, []spec.EgressRule{rule}); err != nil {
		t.Fatalf("set egress: %v", err)
	}
	if out, _ := sh(t, sb, connectVia(otherTarget)); !strings.Contains(out, fmt.Sprintf("hello %d", other.port)) {
		t.Fatalf("after the change, CONNECT %s:\n%s", otherTarget, out)
	}
	if out, _ := sh(t, sb, connectVia(allowedTarget)); !strings.Contains(out, " 403 ") {
		t.Fatalf("after the change, CONNECT %s was not refused:\n%s", allowedTarget, out)
	}
	if n := count(sandboxTypes(t, e.rt, sb.ID()), "sandbox.egress_changed"); n != 1 {
		t.Errorf("journaled %d egress changes, want 1", n)
	}
	if err := sb.SetEgress(ctx, []spec.EgressRule{{}}); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Errorf("an empty rule: %v, want invalid_argument", err)
	}

	// Changes racing each other: the proxy ends on the journal's last.
	ruleA, _ := spec.ParseEgressRule(allowedTarget)
	ruleB, _ := spec.ParseEgressRule(otherTarget)
	errs := make(chan error, 8)
	for i := range 8 {
		r := ruleA
		if i%2 == 1 {
			r = ruleB
		}
		go func() { errs <- sb.SetEgress(ctx, []spec.EgressRule{r}) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("racing changes: %v", err)
		}
	}
	st, err = sb.State(ctx)
	if err != nil || len(st.Spec.Policy.Egress) != 1 {
		t.Fatalf("state after racing changes: %+v %v", st.Spec.Policy, err)
	}
	last, notLast := allowedTarget, otherTarget
	if st.Spec.Policy.Egress[0] == ruleB {
		last, notLast = otherTarget, allowedTarget
	}
	if out, _ := sh(t, sb, connectVia(last)); !strings.Contains(out, "hello") {
		t.Fatalf("after racing changes, the journal's last (%s) is not in force:\n%s", last, out)
	}
	if out, _ := sh(t, sb, connectVia(notLast)); !strings.Contains(out, " 403 ") {
		t.Fatalf("after racing changes, %s (not the journal's last) is admitted:\n%s", notLast, out)
	}

	if err := sb.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	assertSandboxGone(t, e.cli, e.rt.Owner(), sb.ID())
	// Nothing left means nothing: the owner's outside network went with
	// its last allowlist sandbox.
	if n, err := dockertest.Owned(ctx, e.cli, e.rt.Owner()); err != nil || n != 0 {
		t.Fatalf("after the last allowlist sandbox, %d resources of the owner are left (%v)", n, err)
	}

	// The next allowlist sandbox makes the outside network anew (the
	// adapter's cached one is gone).
	sb2, err := e.rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: e.image, Policy: allowlistPolicy(allowedTarget), Lifetime: spec.OneShot})
	if err != nil {
		t.Fatalf("create after the outside network went: %v", err)
	}
	if out, _ := sh(t, sb2, connectVia(allowedTarget)); !strings.Contains(out, fmt.Sprintf("hello %d", allowed.port)) {
		t.Fatalf("after the outside network was made anew:\n%s", out)
	}
	if err := sb2.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
}

// TestEgressRecovery: kill -9 of `stockade serve` with an allowlist
// sandbox, then a restart: the egress role is re-adopted (read back, its
// proxy's link made again), the rules still hold, a rule change after the
// restart takes effect, and decisions go on being recorded.
func TestEgressRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newCLI(t)
	cli := dockertest.Client(t)
	image := dockertest.ImageID(t, cli)
	gw := bridgeGateway(t, cli)
	allowed, other := startOutside(t), startOutside(t)
	allowedTarget := fmt.Sprintf("%s:%d", gw, allowed.port)
	otherTarget := fmt.Sprintf("%s:%d", gw, other.port)

	first := e.serve(t, ctx)
	c, err := clientpkg.Dial(first.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	sb, err := c.CreateSandbox(ctx, host.SandboxSpec{Image: image, Policy: allowlistPolicy(allowedTarget), Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	run := func(sb host.Sandbox, script string) string {
		t.Helper()
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
		b, _ := io.ReadAll(p.Stdout())
		if _, err := p.Wait(ctx); err != nil {
			t.Fatalf("wait: %v", err)
		}
		return string(b)
	}
	if out := run(sb, connectVia(allowedTarget)); !strings.Contains(out, "hello") {
		t.Fatalf("before the crash:\n%s", out)
	}
	before, err := sb.State(ctx)
	if err != nil || before.Created == nil || before.Created.Egress == "" {
		t.Fatalf("state: %+v %v", before, err)
	}
	if err := first.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve survived SIGKILL")
	}
	_ = c.Close()

	second := e.serve(t, ctx)
	c2, err := clientpkg.Dial(second.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	sb2, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatalf("the sandbox after the restart: %v\n%s", err, second.logs.String())
	}
	if out := run(sb2, connectVia(allowedTarget)); !strings.Contains(out, "hello") {
		t.Fatalf("after the restart, the allowed target:\n%s", out)
	}
	// Re-adopted, not made anew: the same egress container, no
	// replacement journaled.
	after, err := sb2.State(ctx)
	if err != nil || after.Created == nil || after.Created.Egress != before.Created.Egress {
		t.Fatalf("the egress container after the restart: %+v %v, want %s", after.Created, err, before.Created.Egress)
	}
	h, err := c2.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range h {
		if ev.Type == "sandbox.egress_replaced" {
			t.Fatalf("the egress container was replaced at recovery: %s", ev.Payload)
		}
	}
	if out := run(sb2, connectVia(otherTarget)); !strings.Contains(out, " 403 ") {
		t.Fatalf("after the restart, another port was not refused:\n%s", out)
	}
	rule, _ := spec.ParseEgressRule(otherTarget)
	if err := sb2.(interface {
		SetEgress(context.Context, []spec.EgressRule) error
	}).SetEgress(ctx, []spec.EgressRule{rule}); err != nil {
		t.Fatalf("set egress after the restart: %v", err)
	}
	if out := run(sb2, connectVia(otherTarget)); !strings.Contains(out, "hello") {
		t.Fatalf("after a change made after the restart:\n%s", out)
	}
	dir := recorder.Dir(e.journal)
	read := func() []egress.Decision {
		var ds []egress.Decision
		if err := recorder.ReadDecisions(dir, sb.ID(), func(d egress.Decision) error { ds = append(ds, d); return nil }); err != nil {
			t.Fatal(err)
		}
		return ds
	}
	waitDecision(t, read, "allow "+otherTarget, func(d egress.Decision) bool {
		return d.Verdict == "allow" && d.Port == uint16(other.port)
	})
	st, err := sb2.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb2.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	assertSandboxGone(t, cli, st.Owner, sb.ID())
	if n, err := dockertest.Owned(ctx, cli, st.Owner); err != nil || n != 0 {
		t.Fatalf("after the last allowlist sandbox, %d resources of the owner are left, the outside network counted (%v)", n, err)
	}
}

// assertSandboxGone checks that no container, network or volume of the
// sandbox is left (the owner's shared outside network is not the
// sandbox's: dockertest.Owned counts it).
func assertSandboxGone(t *testing.T, cli *client.Client, owner, id string) {
	t.Helper()
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", "io.stockade.owner="+owner), filters.Arg("label", "io.stockade.sandbox="+id))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cs) + len(ns) + len(vs.Volumes); n != 0 {
		t.Errorf("sandbox %s left %d containers, %d networks, %d volumes", id, len(cs), len(ns), len(vs.Volumes))
	}
}

// TestEgressCLI: the allowlist through the command line, embedded and
// served: run --network allow=…, sandbox create --network allow=…, a rule
// change with sandbox network, and the decisions in journal show --egress.
func TestEgressCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newCLI(t)
	gw := bridgeGateway(t, dockertest.Client(t))
	allowed, other := startOutside(t), startOutside(t)
	allowedTarget := fmt.Sprintf("%s:%d", gw, allowed.port)
	otherTarget := fmt.Sprintf("%s:%d", gw, other.port)

	// Embedded, one-shot.
	code, out, errOut := e.run(t, "", "run", "--network", "allow="+allowedTarget, "--", "sh", "-c", connectVia(allowedTarget))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("hello %d", allowed.port)) {
		t.Fatalf("run --network allow=: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := e.run(t, "", "run", "--network", "allow=a..b", "--", "true"); code != 2 || !strings.Contains(errOut, "a..b") {
		t.Fatalf("a bad rule: exit %d, %s; want 2 naming the rule", code, errOut)
	}

	// Served, kept.
	srv := e.serve(t, ctx)
	code, out, errOut = e.run(t, "", "sandbox", "create", "--network", "allow="+allowedTarget)
	if code != 0 {
		t.Fatalf("sandbox create: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if code, out, _ := e.run(t, "", "exec", id, "--", "sh", "-c", connectVia(otherTarget)); code != 0 || !strings.Contains(out, " 403 ") {
		t.Fatalf("before the change, %s: %d\n%s", otherTarget, code, out)
	}
	if code, out, errOut := e.run(t, "", "sandbox", "network", id, "allow="+otherTarget); code != 0 || !strings.Contains(out, otherTarget) {
		t.Fatalf("sandbox network: %d %s %s", code, out, errOut)
	}
	if code, out, _ := e.run(t, "", "exec", id, "--", "sh", "-c", connectVia(otherTarget)); code != 0 || !strings.Contains(out, fmt.Sprintf("hello %d", other.port)) {
		t.Fatalf("after the change, %s: %d\n%s", otherTarget, code, out)
	}
	if code, _, errOut := e.run(t, "", "sandbox", "network", id, "open"); code != 2 || !strings.Contains(errOut, "fixed at create") {
		t.Fatalf("changing the kind: exit %d %s; want 2", code, errOut)
	}
	var ds []egress.Decision
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut := e.run(t, "", "journal", "show", id, "--egress", "--json")
		if code != 0 {
			t.Fatalf("journal show --egress: %d %s", code, errOut)
		}
		ds = ds[:0]
		dec := json.NewDecoder(strings.NewReader(out))
		for {
			var d egress.Decision
			if err := dec.Decode(&d); err != nil {
				break
			}
			ds = append(ds, d)
		}
		if len(ds) >= 2 && ds[len(ds)-1].Verdict == "allow" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(ds) < 2 || ds[0].Verdict != "deny" || ds[len(ds)-1].Verdict != "allow" || ds[len(ds)-1].Port != uint16(other.port) {
		t.Fatalf("journal show --egress --json: %+v", ds)
	}
	if code, out, _ := e.run(t, "", "journal", "show", id, "--egress"); code != 0 || !strings.Contains(out, "VERDICT") || !strings.Contains(out, "deny") {
		t.Fatalf("journal show --egress: %d\n%s", code, out)
	}
	if code, out, _ := e.run(t, "", "journal", "show", id, "--type", "sandbox.egress"); code != 0 || !strings.Contains(out, "egress_changed") {
		t.Fatalf("the change is not in the journal: %d\n%s", code, out)
	}
	if code, _, errOut := e.run(t, "", "sandbox", "rm", "-f", id); code != 0 {
		t.Fatalf("rm: %d %s", code, errOut)
	}
	_ = srv.stop(t, syscall.SIGTERM)
}
