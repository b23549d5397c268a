package stockade_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

func egressRules(t *testing.T, ss ...string) []spec.EgressRule {
	t.Helper()
	rules := make([]spec.EgressRule, len(ss))
	for i, s := range ss {
		r, err := spec.ParseEgressRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rules[i] = r
	}
	return rules
}

// egressEvents lists a sandbox's sandbox.egress_changed events, decoded.
func egressEvents(t *testing.T, rt *stockade.Runtime, id string) ([]lifecycle.EgressChanged, []uint64) {
	t.Helper()
	hist, err := rt.History(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var evs []lifecycle.EgressChanged
	var seqs []uint64
	for _, e := range hist {
		if e.Type != (lifecycle.EgressChanged{}).Type() {
			continue
		}
		ev, err := lifecycle.Decode(e.Type, e.Payload)
		if err != nil {
			t.Fatalf("decoding %s: %v", e.Type, err)
		}
		evs, seqs = append(evs, ev.(lifecycle.EgressChanged)), append(seqs, e.Seq)
	}
	return evs, seqs
}

// TestFakeSetEgressJournals: new rules for an allowlist sandbox are
// journaled and folded before the proxy is told; the fake runs no proxy, so
// SetEgress says the rules are journaled but not yet applied.
func TestFakeSetEgressJournals(t *testing.T) {
	rt := testutil.OpenFake(t, testutil.NewFake(t), "")
	ctx := context.Background()
	made := egressRules(t, "a.example:443")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkAllowlist, Egress: made}})
	if evs, _ := egressEvents(t, rt, sb.ID()); len(evs) != 0 {
		t.Fatalf("egress changes journaled at create: %+v", evs)
	}

	rules := egressRules(t, "b.example:443", "*.pypi.org:443", "203.0.113.0/24:80", "[2001:db8::1]:443")
	err := sb.SetEgress(ctx, rules)
	if !spec.IsCode(err, spec.CodeStreamFailure) || !strings.Contains(err.Error(), "journaled") {
		t.Fatalf("SetEgress without a proxy = %v, want a %s error saying the rules are journaled", err, spec.CodeStreamFailure)
	}
	evs, seqs := egressEvents(t, rt, sb.ID())
	if len(evs) != 1 || !reflect.DeepEqual(evs[0].Rules, rules) {
		t.Fatalf("journaled egress changes %+v, want one with %v", evs, rules)
	}
	st, err := sb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Spec.Policy.Egress, rules) || st.RulesVersion == 0 || st.RulesVersion != seqs[0] {
		t.Fatalf("folded rules %v version %d, want %v version %d (the event's seq)", st.Spec.Policy.Egress, st.RulesVersion, rules, seqs[0])
	}
	if st.Phase != lifecycle.PhaseStarted {
		t.Fatalf("sandbox %s after SetEgress, want started", st.Phase)
	}
	// The journal folds to the same.
	folded, err := stockade.FoldSandbox(rt, sb.ID())
	if err != nil || !reflect.DeepEqual(folded.Spec.Policy.Egress, rules) || folded.RulesVersion != seqs[0] {
		t.Fatalf("journal folds to rules %v version %d (%v)", folded.Spec.Policy.Egress, folded.RulesVersion, err)
	}

	// The caller's slice is not the sandbox's.
	rules[0] = spec.EgressRule{Host: "evil.example"}
	if st, err := sb.State(ctx); err != nil || st.Spec.Policy.Egress[0].Host != "b.example" {
		t.Fatalf("the caller's slice reached the sandbox: %v %v", st.Spec.Policy.Egress, err)
	}

	// A second change is a later version; no rules at all is a change too.
	if err := sb.SetEgress(ctx, nil); !spec.IsCode(err, spec.CodeStreamFailure) {
		t.Fatalf("SetEgress(nil) = %v, want %s", err, spec.CodeStreamFailure)
	}
	evs, seqs = egressEvents(t, rt, sb.ID())
	st2, err := sb.State(ctx)
	if err != nil || len(evs) != 2 || len(evs[1].Rules) != 0 || len(st2.Spec.Policy.Egress) != 0 || st2.RulesVersion != seqs[1] || seqs[1] <= seqs[0] {
		t.Fatalf("after emptying: events %+v seqs %v, state rules %v version %d (%v)", evs, seqs, st2.Spec.Policy.Egress, st2.RulesVersion, err)
	}
}

// TestFakeSetEgressRefused: rules for a sandbox of another network kind, or
// a malformed rule, are refused as invalid_argument and journal nothing.
func TestFakeSetEgressRefused(t *testing.T) {
	rt := testutil.OpenFake(t, testutil.NewFake(t), "")
	ctx := context.Background()
	allowlist := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkAllowlist}})
	tests := []struct {
		name  string
		sb    *stockade.Sandbox
		rules []spec.EgressRule
	}{
		{"isolated", mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkIsolated}}), egressRules(t, "a.example")},
		{"default network", mustCreate(t, rt, spec.Sandbox{Image: fakeImage}), egressRules(t, "a.example")},
		{"open", mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkOpen}}), egressRules(t, "a.example")},
		{"open, no rules", mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkOpen}}), nil},
		{"empty rule", allowlist, []spec.EgressRule{{}}},
		{"empty rule after a good one", allowlist, append(egressRules(t, "a.example"), spec.EgressRule{})},
		{"too many rules", allowlist, slices.Repeat(egressRules(t, "a.example"), spec.MaxEgressRules+1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, err := rt.History(t.Context(), tc.sb.ID())
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.sb.SetEgress(ctx, tc.rules); !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("SetEgress = %v, want %s", err, spec.CodeInvalidArgument)
			}
			after, err := rt.History(t.Context(), tc.sb.ID())
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(before) {
				t.Fatalf("journaled %d events for a refused change", len(after)-len(before))
			}
			st, err := tc.sb.State(ctx)
			if err != nil || st.RulesVersion != 0 || len(st.Spec.Policy.Egress) != 0 {
				t.Fatalf("state after a refused change: rules %v version %d (%v)", st.Spec.Policy.Egress, st.RulesVersion, err)
			}
		})
	}
}

// TestFakeAllowlistExecGetsProxy: a process of an allowlist sandbox is
// created with the sandbox's proxy and its own id. The Fake sees the
// ExecRequest before the engine adds the proxy variables (the real
// engine's CreateExec applies dockerio.ProxyEnv to it), so this checks the
// inputs it gets: the proxy address on the sandbox handle and the process
// id, which make HTTP_PROXY=http://<process>@10.213.0.2:3128.
func TestFakeAllowlistExecGetsProxy(t *testing.T) {
	f := testutil.NewFake(t)
	type seen struct {
		sb  dockerio.Sandbox
		req dockerio.ExecRequest
	}
	var mu sync.Mutex
	var execs []seen
	f.Script = func(sb dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		mu.Lock()
		defer mu.Unlock()
		execs = append(execs, seen{sb, req})
		return dockerio.FakeRun{}
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		policy spec.Policy
		proxy  bool
	}{
		{"allowlist", spec.Policy{Network: spec.NetworkAllowlist, Egress: egressRules(t, "a.example:443")}, true},
		{"open", spec.Policy{Network: spec.NetworkOpen}, false},
		{"isolated", spec.Policy{Network: spec.NetworkIsolated}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: tc.policy})
			p := mustStart(t, sb, spec.Process{Argv: []string{"curl"}, Env: []string{"A=1"}, Stdout: spec.Discard, Stderr: spec.Discard})
			if res, err := p.Wait(ctx); err != nil || res.Reason != string(lifecycle.ReasonExited) {
				t.Fatalf("wait: %+v %v", res, err)
			}
			mu.Lock()
			x := execs[len(execs)-1]
			mu.Unlock()
			if x.req.ProcessID != p.ID() {
				t.Fatalf("exec for process %q, want %q", x.req.ProcessID, p.ID())
			}
			env := dockerio.ProxyEnv(x.sb, x.req.ProcessID, x.req.Spec.Env)
			url := "http://" + p.ID() + "@10.213.0.2:3128"
			for _, kv := range []string{"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "http_proxy=" + url, "https_proxy=" + url} {
				if slices.Contains(env, kv) != tc.proxy {
					t.Errorf("%s in the exec's environment: %v, want %v (env %q)", kv, !tc.proxy, tc.proxy, env)
				}
			}
			if !slices.Contains(env, "A=1") {
				t.Errorf("the process's own variable lost: %q", env)
			}
		})
	}
}
