package testkit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/spec"
)

// The allowlist network against the real daemon. There is no internet
// here: the "outside" is HTTP servers of the test on the host, reached at
// the default bridge's gateway address.

// OutsideServer is an HTTP server on every host address: GET / answers
// "hello <port>", GET /bytes/N answers N bytes.
type OutsideServer struct {
	Port int
	Hits atomic.Int64
	// leaked counts requests that arrived with proxy credentials (the
	// proxy must strip them).
	Leaked atomic.Int64
	// sent counts the body bytes written.
	Sent atomic.Int64
}

// StartOutside starts an OutsideServer on an ephemeral port of every host
// address; it is closed when the test ends.
func StartOutside(t testing.TB) *OutsideServer {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &OutsideServer{Port: ln.Addr().(*net.TCPAddr).Port}
	block := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Hits.Add(1)
		if r.Header.Get("Proxy-Authorization") != "" {
			s.Leaked.Add(1)
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
				s.Sent.Add(int64(n))
				if err != nil {
					return
				}
				size -= k
			}
			return
		}
		n, _ := fmt.Fprintf(w, "hello %d\n", s.Port)
		s.Sent.Add(int64(n))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
	})
	return s
}

// BridgeGateway is the default bridge's gateway: the host, as containers
// see it.
func BridgeGateway(t testing.TB, cli *client.Client) string {
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

// ProxyScript is sh that splits $HTTP_PROXY (http://user@ip:port) into $ph
// and $pp, and makes $auth, the Basic credentials of its user (the process
// id, which the proxy records), as a proxy client such as curl sends them.
const ProxyScript = `p=${HTTP_PROXY#*@}; ph=${p%:*}; pp=${p##*:}; u=${HTTP_PROXY#http://}; u=${u%%@*}; auth=$(printf '%s:' "$u" | base64); `

// ConnectVia returns sh that asks the proxy to CONNECT to target and sends
// a GET through the tunnel; its output is the proxy's answer and, when
// admitted, the server's.
func ConnectVia(target string) string {
	return ProxyScript + fmt.Sprintf(`printf 'CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\nProxy-Authorization: Basic %%s\r\n\r\nGET / HTTP/1.1\r\nHost: %[1]s\r\nConnection: close\r\n\r\n' "$auth" | nc -w 5 "$ph" "$pp"`, target)
}

// GetVia returns sh that sends a plain-HTTP proxy request for url.
func GetVia(url string) string {
	return ProxyScript + fmt.Sprintf(`printf 'GET %s HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic %%s\r\nConnection: close\r\n\r\n' "$auth" | nc -w 5 "$ph" "$pp"`, url)
}

// AllowlistPolicy is SmallPolicy on the allowlist network with the given
// egress rules (panicking on a rule that does not parse).
func AllowlistPolicy(rules ...string) spec.Policy {
	p := SmallPolicy()
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

// AssertSandboxGone checks that no container, network or volume of the
// sandbox is left (the owner's shared outside network is not the
// sandbox's: dockertest.Owned counts it).
func AssertSandboxGone(t *testing.T, cli *client.Client, owner, id string) {
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
