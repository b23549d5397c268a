package dockerio

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/network"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

func TestProxyAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.213.0.0/28":  "10.213.0.14",
		"10.213.0.16/28": "10.213.0.30",
		"10.213.1.0/24":  "10.213.1.254",
	} {
		if got := proxyAddr(netip.MustParsePrefix(in)).String(); got != want {
			t.Errorf("proxyAddr(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestAllocSubnet(t *testing.T) {
	a := &Adapter{subnets: netip.MustParsePrefix("10.213.0.0/26")}
	nets := func(subnets ...string) []network.Summary {
		var out []network.Summary
		for _, s := range subnets {
			out = append(out, network.Summary{IPAM: network.IPAM{Config: []network.IPAMConfig{{Subnet: s}}}})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		used []string
		skip []string
		bits int
		want string // "" means none is free
	}{
		{"empty", nil, nil, 28, "10.213.0.0/28"},
		{"first taken", []string{"10.213.0.0/28"}, nil, 28, "10.213.0.16/28"},
		{"overlapped by a wider net", []string{"10.213.0.0/27"}, nil, 28, "10.213.0.32/28"},
		{"skipped after a refusal", nil, []string{"10.213.0.0/28"}, 28, "10.213.0.16/28"},
		{"another range is no matter", []string{"172.17.0.0/16"}, nil, 28, "10.213.0.0/28"},
		{"full", []string{"10.213.0.0/26"}, nil, 28, ""},
		{"a wider block", []string{"10.213.0.0/28"}, nil, 27, "10.213.0.32/27"},
	} {
		var skip []netip.Prefix
		for _, s := range tc.skip {
			skip = append(skip, netip.MustParsePrefix(s))
		}
		got, err := a.allocSubnet(nets(tc.used...), tc.bits, skip)
		switch {
		case tc.want == "" && !spec.IsCode(err, spec.CodeUnsupported):
			t.Errorf("%s: %v %v, want none free", tc.name, got, err)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("%s: %v %v, want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestParseSubnets(t *testing.T) {
	t.Setenv("STOCKADE_SUBNETS", "")
	if p, err := parseSubnets(""); err != nil || p.String() != defaultSubnets {
		t.Errorf("default: %v %v", p, err)
	}
	t.Setenv("STOCKADE_SUBNETS", "10.99.0.0/20")
	if p, err := parseSubnets(""); err != nil || p.String() != "10.99.0.0/20" {
		t.Errorf("from the environment: %v %v", p, err)
	}
	for _, bad := range []string{"10.0.0.0/25", "fd00::/8", "nope"} {
		if _, err := parseSubnets(bad); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", bad, err)
		}
	}
}

func TestProxyEnv(t *testing.T) {
	sb := Sandbox{Proxy: "10.213.0.14:3128"}
	env := ProxyEnv(sb, "p1", []string{"A=1", "NO_PROXY=mine"})
	want := []string{"A=1", "NO_PROXY=mine", "HTTP_PROXY=http://p1@10.213.0.14:3128", "http_proxy=http://p1@10.213.0.14:3128",
		"HTTPS_PROXY=http://p1@10.213.0.14:3128", "https_proxy=http://p1@10.213.0.14:3128", "no_proxy=localhost,127.0.0.1,::1"}
	if !slices.Equal(env, want) {
		t.Errorf("ProxyEnv = %q, want %q", env, want)
	}
	if env := ProxyEnv(Sandbox{}, "p1", []string{"A=1"}); !slices.Equal(env, []string{"A=1"}) {
		t.Errorf("without a proxy: %q", env)
	}
}

// egressDoc is a started egress container's inspect JSON as the adapter
// makes it, for verifyEgress to find each change in.
func egressDoc(t *testing.T, a *Adapter, sb Sandbox) (map[string]any, egressExpect) {
	t.Helper()
	e := a.egressExpect(sb, "sha256:img", true)
	b := a.egressBody(sb, "sha256:img", sb.Network)
	raw, err := json.Marshal(map[string]any{
		"Id": "c1", "Name": "/" + e.Name, "Image": "sha256:img",
		"State":           map[string]any{"Running": true, "Status": "running"},
		"AppArmorProfile": "",
		"Config":          b.Config,
		"HostConfig":      b.HostConfig,
		"Mounts":          []any{},
		"NetworkSettings": map[string]any{"Networks": map[string]any{
			"int": map[string]any{"NetworkID": sb.Network, "IPAddress": "10.213.0.14"}, "out": map[string]any{"NetworkID": sb.Outside, "IPAddress": "10.213.255.2"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc, e
}

func TestVerifyEgress(t *testing.T) {
	a := &Adapter{profile: profile.Profile{Name: "p", Init: true}}
	r, _ := spec.ParseEgressRule("a.com:443")
	pol := spec.DefaultPolicy()
	pol.Network, pol.Egress = spec.NetworkAllowlist, []spec.EgressRule{r}
	sb := Sandbox{Owner: "o", ID: "s", Spec: spec.Sandbox{Policy: pol}, Network: "int-id", Outside: "out-id", Proxy: "10.213.0.14:3128", Egress: "c1"}
	check := func(name string, mutate func(doc map[string]any), want string) {
		t.Helper()
		doc, e := egressDoc(t, a, sb)
		mutate(doc)
		raw, _ := json.Marshal(doc)
		err := verifyEgress(raw, e)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case want != "" && (!spec.IsCode(err, spec.CodeUnsupported) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want a mismatch at %s", name, err, want)
		}
	}
	hc := func(doc map[string]any) map[string]any { return doc["HostConfig"].(map[string]any) }
	cf := func(doc map[string]any) map[string]any { return doc["Config"].(map[string]any) }
	check("as made", func(map[string]any) {}, "")
	check("other rules (a live change)", func(doc map[string]any) {
		cmd := cf(doc)["Cmd"].([]any)
		cmd[len(cmd)-1] = "b.com"
		cmd[len(cmd)-3] = "7"
	}, "")
	check("writable root", func(doc map[string]any) { hc(doc)["ReadonlyRootfs"] = false }, "ReadonlyRootfs")
	check("a capability", func(doc map[string]any) { hc(doc)["CapAdd"] = []string{"NET_ADMIN"} }, "CapAdd")
	check("root", func(doc map[string]any) { cf(doc)["User"] = "0:0" }, "Config.User")
	check("privileged", func(doc map[string]any) { hc(doc)["Privileged"] = true }, "Privileged")
	check("another image", func(doc map[string]any) { doc["Image"] = "sha256:other" }, "Image")
	check("another listen address", func(doc map[string]any) { cf(doc)["Cmd"].([]any)[2] = "0.0.0.0:3128" }, "Config.Cmd")
	check("a mount", func(doc map[string]any) { doc["Mounts"] = []any{map[string]any{"Type": "bind"}} }, "Mounts")
	check("no memory limit", func(doc map[string]any) { hc(doc)["Memory"] = 0 }, "Memory")
	check("a third network", func(doc map[string]any) {
		doc["NetworkSettings"].(map[string]any)["Networks"].(map[string]any)["bridge"] = map[string]any{"NetworkID": "b"}
	}, "Networks")
	check("not running", func(doc map[string]any) { doc["State"].(map[string]any)["Running"] = false }, "State.Running")
	check("another address", func(doc map[string]any) {
		doc["NetworkSettings"].(map[string]any)["Networks"].(map[string]any)["int"].(map[string]any)["IPAddress"] = "10.213.0.2"
	}, "IPAddress")
	check("a host cgroup namespace", func(doc map[string]any) { hc(doc)["CgroupnsMode"] = "host" }, "CgroupnsMode")
	check("restarts", func(doc map[string]any) {
		hc(doc)["RestartPolicy"] = map[string]any{"Name": "always", "MaximumRetryCount": 0}
	}, "RestartPolicy")
	check("a health check", func(doc map[string]any) { cf(doc)["Healthcheck"] = map[string]any{"Test": []string{"CMD", "x"}} }, "Healthcheck")
	check("a published port", func(doc map[string]any) {
		doc["NetworkSettings"].(map[string]any)["Ports"] = map[string]any{"3128/tcp": nil}
	}, "Ports")
}
