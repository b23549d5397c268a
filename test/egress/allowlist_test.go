package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/stockade/stockade"
	clientpkg "github.com/stockade/stockade/client"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/test/testkit"
)

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

func sh(t *testing.T, sb *stockade.Sandbox, script string) (string, spec.Result) {
	t.Helper()
	out, errOut, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return out + errOut, res
}

func decisions(t *testing.T, rt *stockade.Runtime, id string) []egress.Decision {
	t.Helper()
	ds, err := rt.Egress(context.Background(), id)
	if err != nil {
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
	e := testkit.NewAPI(t, stockade.Options{})
	gw := testkit.BridgeGateway(t, e.Docker)
	allowed, other := testkit.StartOutside(t), testkit.StartOutside(t)
	allowedTarget := fmt.Sprintf("%s:%d", gw, allowed.Port)
	otherTarget := fmt.Sprintf("%s:%d", gw, other.Port)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.AllowlistPolicy(allowedTarget), Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	read := func() []egress.Decision { return decisions(t, e.RT, sb.ID()) }

	// The environment names the proxy, per process, with the process id as
	// its user; the container's own environment stays the seed's.
	out, _ := sh(t, sb, `env | grep -i _proxy= | sort`)
	for _, k := range []string{"HTTP_PROXY=http://", "HTTPS_PROXY=http://", "NO_PROXY=", "http_proxy=http://", "https_proxy=http://", "no_proxy="} {
		if !strings.Contains(out, k) {
			t.Errorf("process environment lacks %s:\n%s", k, out)
		}
	}

	t.Run("allowed CONNECT", func(t *testing.T) {
		out, _ := sh(t, sb, testkit.ConnectVia(allowedTarget))
		if !strings.Contains(out, " 200 ") || !strings.Contains(out, fmt.Sprintf("hello %d", allowed.Port)) {
			t.Fatalf("CONNECT %s through the proxy:\n%s", allowedTarget, out)
		}
		d := waitDecision(t, read, "allow "+allowedTarget, func(d egress.Decision) bool {
			return d.Verdict == "allow" && d.Method == "CONNECT" && d.Port == uint16(allowed.Port) && d.Down > 0
		})
		if d.Process == "" || d.Addr == "" || d.Rule == "" || d.Up == 0 {
			t.Errorf("allow decision lacks process, address, rule or bytes: %+v", d)
		}
	})
	t.Run("allowed plain HTTP", func(t *testing.T) {
		out, _ := sh(t, sb, testkit.GetVia("http://"+allowedTarget+"/"))
		if !strings.Contains(out, fmt.Sprintf("hello %d", allowed.Port)) {
			t.Fatalf("GET through the proxy:\n%s", out)
		}
		if n := allowed.Leaked.Load(); n != 0 {
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
			out, _ := sh(t, sb, testkit.ConnectVia(tc.target))
			if !strings.Contains(out, " 403 ") || strings.Contains(out, "hello") {
				t.Fatalf("CONNECT %s was not refused:\n%s", tc.target, out)
			}
			host, port, _ := net.SplitHostPort(tc.target)
			waitDecision(t, read, "deny "+tc.target, func(d egress.Decision) bool {
				return d.Verdict == "deny" && d.Host == host && strconv.Itoa(int(d.Port)) == port && d.Reason != ""
			})
		})
	}
	if other.Hits.Load() != 0 {
		t.Errorf("the refused server was reached %d times", other.Hits.Load())
	}

	// Nothing but the proxy has a route: raw TCP to the allowed address
	// and port, the internal network's gateway address, the host's own
	// address, UDP to the host (DNS is TestHostileNetwork's, with a
	// listener on port 53).
	hits := allowed.Hits.Load()
	st, err := sb.State(ctx)
	if err != nil || st.Created == nil || st.Created.Network == "" {
		t.Fatalf("state: %+v %v", st, err)
	}
	n, err := e.Docker.NetworkInspect(ctx, st.Created.Network, network.InspectOptions{})
	if err != nil || len(n.IPAM.Config) != 1 || !n.Internal {
		t.Fatalf("the sandbox's network: %+v %v", n, err)
	}
	subnet := netip.MustParsePrefix(n.IPAM.Config[0].Subnet)
	probes := []string{
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, gw, allowed.Port),
		// The internal network's gateway address, which the host would
		// hold but for inhibit_ipv4.
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, subnet.Addr().Next(), allowed.Port),
	}
	if ha := hostAddress(t); ha != "" {
		probes = append(probes, fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, ha, allowed.Port))
	}
	for _, p := range probes {
		if out, _ := sh(t, sb, p); strings.Contains(out, "hello") {
			t.Errorf("bypassing the proxy reached the server: %s\n%s", p, out)
		}
	}
	if n := allowed.Hits.Load(); n != hits {
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
	openPol := testkit.SmallPolicy()
	openPol.Network = spec.NetworkOpen
	control, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: openPol, Lifetime: spec.OneShot})
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
	if out, _ := sh(t, sb, testkit.ConnectVia(otherTarget)); !strings.Contains(out, fmt.Sprintf("hello %d", other.Port)) {
		t.Fatalf("after the change, CONNECT %s:\n%s", otherTarget, out)
	}
	if out, _ := sh(t, sb, testkit.ConnectVia(allowedTarget)); !strings.Contains(out, " 403 ") {
		t.Fatalf("after the change, CONNECT %s was not refused:\n%s", allowedTarget, out)
	}
	if n := testkit.Count(testkit.SandboxTypes(t, e.RT, sb.ID()), "sandbox.egress_changed"); n != 1 {
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
	if out, _ := sh(t, sb, testkit.ConnectVia(last)); !strings.Contains(out, "hello") {
		t.Fatalf("after racing changes, the journal's last (%s) is not in force:\n%s", last, out)
	}
	if out, _ := sh(t, sb, testkit.ConnectVia(notLast)); !strings.Contains(out, " 403 ") {
		t.Fatalf("after racing changes, %s (not the journal's last) is admitted:\n%s", notLast, out)
	}

	if err := sb.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	testkit.AssertSandboxGone(t, e.Docker, e.RT.Owner(), sb.ID())
	// Nothing left means nothing: the owner's outside network went with
	// its last allowlist sandbox.
	if n, err := dockertest.Owned(ctx, e.Docker, e.RT.Owner()); err != nil || n != 0 {
		t.Fatalf("after the last allowlist sandbox, %d resources of the owner are left (%v)", n, err)
	}

	// The next allowlist sandbox makes the outside network anew (the
	// adapter's cached one is gone).
	sb2, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.AllowlistPolicy(allowedTarget), Lifetime: spec.OneShot})
	if err != nil {
		t.Fatalf("create after the outside network went: %v", err)
	}
	if out, _ := sh(t, sb2, testkit.ConnectVia(allowedTarget)); !strings.Contains(out, fmt.Sprintf("hello %d", allowed.Port)) {
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
	e := testkit.NewCLI(t)
	cli := dockertest.Client(t)
	image := dockertest.ImageID(t, cli)
	gw := testkit.BridgeGateway(t, cli)
	allowed, other := testkit.StartOutside(t), testkit.StartOutside(t)
	allowedTarget := fmt.Sprintf("%s:%d", gw, allowed.Port)
	otherTarget := fmt.Sprintf("%s:%d", gw, other.Port)

	first := e.Serve(t, ctx)
	c, err := clientpkg.Dial(first.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: testkit.AllowlistPolicy(allowedTarget), Lifetime: spec.Kept})
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
	if out := run(sb, testkit.ConnectVia(allowedTarget)); !strings.Contains(out, "hello") {
		t.Fatalf("before the crash:\n%s", out)
	}
	before, err := sb.State(ctx)
	if err != nil || before.Created == nil || before.Created.Egress == "" {
		t.Fatalf("state: %+v %v", before, err)
	}
	if err := first.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve survived SIGKILL")
	}
	_ = c.Close()

	second := e.Serve(t, ctx)
	c2, err := clientpkg.Dial(second.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	sb2, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatalf("the sandbox after the restart: %v\n%s", err, second.Logs.String())
	}
	if out := run(sb2, testkit.ConnectVia(allowedTarget)); !strings.Contains(out, "hello") {
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
	if out := run(sb2, testkit.ConnectVia(otherTarget)); !strings.Contains(out, " 403 ") {
		t.Fatalf("after the restart, another port was not refused:\n%s", out)
	}
	rule, _ := spec.ParseEgressRule(otherTarget)
	if err := sb2.(interface {
		SetEgress(context.Context, []spec.EgressRule) error
	}).SetEgress(ctx, []spec.EgressRule{rule}); err != nil {
		t.Fatalf("set egress after the restart: %v", err)
	}
	if out := run(sb2, testkit.ConnectVia(otherTarget)); !strings.Contains(out, "hello") {
		t.Fatalf("after a change made after the restart:\n%s", out)
	}
	dir := statedir.Recordings(e.Journal)
	read := func() []egress.Decision {
		var ds []egress.Decision
		if err := recorder.ReadDecisions(dir, sb.ID(), func(d egress.Decision) error { ds = append(ds, d); return nil }); err != nil {
			t.Fatal(err)
		}
		return ds
	}
	waitDecision(t, read, "allow "+otherTarget, func(d egress.Decision) bool {
		return d.Verdict == "allow" && d.Port == uint16(other.Port)
	})
	st, err := sb2.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb2.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	testkit.AssertSandboxGone(t, cli, st.Owner, sb.ID())
	if n, err := dockertest.Owned(ctx, cli, st.Owner); err != nil || n != 0 {
		t.Fatalf("after the last allowlist sandbox, %d resources of the owner are left, the outside network counted (%v)", n, err)
	}
}

// TestEgressCLI: the allowlist through the command line, embedded and
// served: run --network allow=…, sandbox create --network allow=…, a rule
// change with sandbox network, and the decisions in journal show --egress.
func TestEgressCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	gw := testkit.BridgeGateway(t, dockertest.Client(t))
	allowed, other := testkit.StartOutside(t), testkit.StartOutside(t)
	allowedTarget := fmt.Sprintf("%s:%d", gw, allowed.Port)
	otherTarget := fmt.Sprintf("%s:%d", gw, other.Port)

	// Embedded, one-shot.
	code, out, errOut := e.Run(t, "", "run", "--network", "allow="+allowedTarget, "--", "sh", "-c", testkit.ConnectVia(allowedTarget))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("hello %d", allowed.Port)) {
		t.Fatalf("run --network allow=: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := e.Run(t, "", "run", "--network", "allow=a..b", "--", "true"); code != 2 || !strings.Contains(errOut, "a..b") {
		t.Fatalf("a bad rule: exit %d, %s; want 2 naming the rule", code, errOut)
	}

	// Served, kept.
	srv := e.Serve(t, ctx)
	code, out, errOut = e.Run(t, "", "sandbox", "create", "--network", "allow="+allowedTarget)
	if code != 0 {
		t.Fatalf("sandbox create: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if code, out, _ := e.Run(t, "", "exec", id, "--", "sh", "-c", testkit.ConnectVia(otherTarget)); code != 0 || !strings.Contains(out, " 403 ") {
		t.Fatalf("before the change, %s: %d\n%s", otherTarget, code, out)
	}
	if code, out, errOut := e.Run(t, "", "sandbox", "network", id, "allow="+otherTarget); code != 0 || !strings.Contains(out, otherTarget) {
		t.Fatalf("sandbox network: %d %s %s", code, out, errOut)
	}
	if code, out, _ := e.Run(t, "", "exec", id, "--", "sh", "-c", testkit.ConnectVia(otherTarget)); code != 0 || !strings.Contains(out, fmt.Sprintf("hello %d", other.Port)) {
		t.Fatalf("after the change, %s: %d\n%s", otherTarget, code, out)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "network", id, "open"); code != 2 || !strings.Contains(errOut, "fixed at create") {
		t.Fatalf("changing the kind: exit %d %s; want 2", code, errOut)
	}
	var ds []egress.Decision
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut := e.Run(t, "", "journal", "show", id, "--egress", "--json")
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
	if len(ds) < 2 || ds[0].Verdict != "deny" || ds[len(ds)-1].Verdict != "allow" || ds[len(ds)-1].Port != uint16(other.Port) {
		t.Fatalf("journal show --egress --json: %+v", ds)
	}
	if code, out, _ := e.Run(t, "", "journal", "show", id, "--egress"); code != 0 || !strings.Contains(out, "VERDICT") || !strings.Contains(out, "deny") {
		t.Fatalf("journal show --egress: %d\n%s", code, out)
	}
	if code, out, _ := e.Run(t, "", "journal", "show", id, "--type", "sandbox.egress"); code != 0 || !strings.Contains(out, "egress_changed") {
		t.Fatalf("the change is not in the journal: %d\n%s", code, out)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "rm", "-f", id); code != 0 {
		t.Fatalf("rm: %d %s", code, errOut)
	}
	_ = srv.Stop(t, syscall.SIGTERM)
}
