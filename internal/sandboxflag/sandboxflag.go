// Package sandboxflag reads a sandbox's policy and a warm pool's spec
// from command-line flags, the same way for every program that takes them
// (stockade's sandbox create, run and serve --pool; stockade-node's
// --pool), so a value means one thing wherever it is given.
package sandboxflag

import (
	"flag"
	"io"
	"slices"
	"strconv"
	"strings"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// Policy is a sandbox policy's flags. Their zero values (the flags'
// defaults) mean the policy's defaults, field by field.
type Policy struct {
	p       spec.Policy
	memory  string
	network string
	user    string
}

func (f *Policy) Register(fs *flag.FlagSet) {
	fs.Float64Var(&f.p.CPUs, "cpus", 0, "CPU quota in cores (0: the default)")
	fs.StringVar(&f.memory, "memory", "", "memory limit in bytes, or with k/m/g (default 512m)")
	fs.Int64Var(&f.p.Pids, "pids", 0, "maximum tasks (0: the default)")
	fs.StringVar(&f.network, "network", "", "isolated, open, or allow=RULE[,RULE...] (host, *.suffix, IP or CIDR, each with an optional :port) (default isolated)")
	fs.StringVar(&f.user, "user", "", "uid:gid (default 65532:65532)")
}

func (f *Policy) Policy() (spec.Policy, error) {
	p := f.p
	var err error
	if f.memory != "" {
		if p.MemoryBytes, err = Bytes(f.memory); err != nil {
			return p, err
		}
	}
	if f.network != "" {
		if p.Network, p.Egress, err = spec.ParseNetwork(f.network); err != nil {
			return p, err
		}
	}
	p = p.WithDefaults()
	// After the defaults: --user 0:0 is root asked for, not a zero value.
	if f.user != "" {
		if p.User, err = User(f.user); err != nil {
			return p, err
		}
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	// A policy Docker cannot honour exactly (memory under 6 MiB or not in
	// whole pages, cpus under 0.01...) is bad input too: refused here as a
	// usage error, before any journal or daemon. The cause keeps its
	// unsupported code.
	if err := profile.AdmitPolicy(p); err != nil {
		return p, spec.Wrap(spec.CodeInvalidArgument, "policy", err, "")
	}
	return p, nil
}

// Bytes reads a size; 0 is a size too (the caller's default).
func Bytes(s string) (int64, error) {
	mult := int64(1)
	t := strings.ToLower(strings.TrimSpace(s))
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, spec.Errorf(spec.CodeInvalidArgument, "run", "--memory %q is not a size (e.g. 512m; 0: the default)", s)
	}
	return n * mult, nil
}

// User reads uid:gid.
func User(s string) (spec.User, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseInt(u, 10, 64)
	gid, err2 := strconv.ParseInt(g, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return spec.User{}, spec.Errorf(spec.CodeInvalidArgument, "run", "--user %q is not uid:gid", s)
	}
	return spec.User{UID: uid, GID: gid}, nil
}

// PoolKeys are the keys a --pool spec takes besides size: the flags of
// `sandbox create` that fix a sandbox's body (its pool key), parsed by the
// same flags. Lifetime, TTL, env, dir, labels and allowlist rules are the
// claimant's, given at the claim.
var PoolKeys = []string{"image", "cpus", "memory", "pids", "network", "user"}

// Pool reads --pool NAME=KEY=VALUE,...,size=N into a pool spec, its
// policy defaulted and checked as `sandbox create`'s flags are: every
// unknown key or bad value is a usage error naming it.
func Pool(cmd, v string) (stockade.PoolSpec, error) {
	const form = "NAME=KEY=VALUE,...,size=N"
	name, rest, ok := strings.Cut(v, "=")
	if !ok || rest == "" {
		return stockade.PoolSpec{}, spec.Errorf(spec.CodeInvalidArgument, cmd, "--pool %q is not %s", v, form)
	}
	bad := func(format string, args ...any) error {
		return spec.Errorf(spec.CodeInvalidArgument, cmd, "--pool %s: "+format, append([]any{name}, args...)...)
	}
	if err := stockade.CheckPoolName(name); err != nil {
		return stockade.PoolSpec{}, bad("%v", err)
	}
	// A flag set of its own, with the same flags (and so the same parsing)
	// as sandbox create's image and policy.
	fs := flag.NewFlagSet("pool", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	image := fs.String("image", "stockade/toolbox:dev", "")
	var pf Policy
	pf.Register(fs)
	size := -1
	given := map[string]bool{}
	for _, kv := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return stockade.PoolSpec{}, bad("%q is not KEY=VALUE (the form is %s)", kv, form)
		case given[k]:
			return stockade.PoolSpec{}, bad("%s is given twice", k)
		case k == "size":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > stockade.MaxPoolSize {
				return stockade.PoolSpec{}, bad("size %q is not a number from 0 to %d", val, stockade.MaxPoolSize)
			}
			size = n
		case !slices.Contains(PoolKeys, k):
			return stockade.PoolSpec{}, bad("unknown key %q (keys: %s, size)", k, strings.Join(PoolKeys, ", "))
		default:
			if err := fs.Set(k, val); err != nil {
				return stockade.PoolSpec{}, bad("%s=%q: %v", k, val, err)
			}
		}
		given[k] = true
	}
	if size < 0 {
		return stockade.PoolSpec{}, bad("no size=N")
	}
	if *image == "" {
		return stockade.PoolSpec{}, bad("image is empty")
	}
	pol, err := pf.Policy()
	if err != nil {
		return stockade.PoolSpec{}, spec.Wrap(spec.CodeInvalidArgument, cmd, err, "--pool %s", name)
	}
	if len(pol.Egress) > 0 {
		return stockade.PoolSpec{}, bad("allowlist rules are the claimant's, given at the claim: use network=allowlist")
	}
	ss := spec.Sandbox{Image: *image, Policy: pol}
	if err := (spec.Sandbox{Image: ss.Image, Policy: ss.Policy, Lifetime: spec.Kept}).ValidateUnpinned(); err != nil {
		return stockade.PoolSpec{}, spec.Wrap(spec.CodeInvalidArgument, cmd, err, "--pool %s", name)
	}
	return stockade.PoolSpec{Name: name, Sandbox: ss, Size: size}, nil
}
