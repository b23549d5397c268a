package spec

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// SecretVar is an environment variable whose value is a secret: every
// process of its sandbox has it, as it has Env's, but the value is never
// written down by the runtime — not in the journal, a recording, a
// checkpoint, a listing or a sandbox's state. The journal keeps Name and
// Ref (the caller's word for where the value comes from, such as "secret
// default/creds key token"), so a reader of the history knows what a
// process was given without learning it.
//
// The value lives in the runtime's memory only. A runtime that re-adopts
// the sandbox after a restart does not have it: processes are refused
// (code conflict, naming each variable and its Ref) until the caller gives
// the values again (Sandbox.SetSecrets). A re-run of a process that had
// secrets needs them given again too.
type SecretVar struct {
	Name  string `json:"name"`
	Ref   string `json:"ref,omitempty"`
	Value string `json:"-"`
}

// String names the variable and its ref, never its value: a SecretVar
// printed (an error, a log line, a %v of a message that carries one)
// shows what it is, not what it holds.
func (s SecretVar) String() string {
	out := s.Name
	if s.Ref != "" {
		out += " (" + s.Ref + ")"
	}
	if s.Value != "" {
		out += " [value withheld]"
	}
	return out
}

// GoString is String, for %#v.
func (s SecretVar) GoString() string { return s.String() }

// LogValue is String, for slog.
func (s SecretVar) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Bounds on secret variables, besides the env's (MaxEnv and
// MaxArgvEnvBytes count them with the env).
const MaxSecretRefBytes = 256

// validateSecrets checks names, refs and bounds: a name is a variable name
// given once, not also in env; a ref is printable and bounded.
func validateSecrets(secrets []SecretVar, env []string) error {
	if len(secrets)+len(env) > MaxEnv {
		return Errorf(CodeInvalidArgument, "sandbox", "env and secrets have %d entries together, over the limit of %d", len(secrets)+len(env), MaxEnv)
	}
	seen := map[string]bool{}
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		seen[name] = true
	}
	total := 0
	for i, s := range secrets {
		switch {
		case !ValidEnvName(s.Name):
			return Errorf(CodeInvalidArgument, "sandbox", "secrets[%d]: %q is not a variable name", i, clip(s.Name))
		case seen[s.Name]:
			return Errorf(CodeInvalidArgument, "sandbox", "secret %s is also in env, or given twice: a variable is one or the other, once", s.Name)
		case len(s.Ref) > MaxSecretRefBytes:
			return Errorf(CodeInvalidArgument, "sandbox", "secret %s: its ref is %d bytes, over the limit of %d", s.Name, len(s.Ref), MaxSecretRefBytes)
		case strings.ContainsFunc(s.Ref, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return Errorf(CodeInvalidArgument, "sandbox", "secret %s: its ref holds a control character", s.Name)
		case strings.IndexByte(s.Value, 0) >= 0:
			return Errorf(CodeInvalidArgument, "sandbox", "secret %s: its value holds a NUL byte", s.Name)
		}
		seen[s.Name] = true
		total += len(s.Name) + 1 + len(s.Value) + 1
	}
	if total > MaxArgvEnvBytes {
		return Errorf(CodeInvalidArgument, "sandbox", "secrets are %d bytes together, over the limit of %d", total, MaxArgvEnvBytes)
	}
	return nil
}

// WithoutSecretValues returns secrets with every Value cleared: what may
// be journaled, listed or shown.
func WithoutSecretValues(secrets []SecretVar) []SecretVar {
	if secrets == nil {
		return nil
	}
	out := make([]SecretVar, len(secrets))
	for i, s := range secrets {
		out[i] = SecretVar{Name: s.Name, Ref: s.Ref}
	}
	return out
}

// SecretEnv is env with the secrets' NAME=value before it, each secret
// whose name env sets itself left out (the process's own variable wins, as
// over the sandbox's env).
func SecretEnv(secrets map[string]string, env []string) []string {
	if len(secrets) == 0 {
		return env
	}
	own := map[string]bool{}
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		own[name] = true
	}
	out := make([]string, 0, len(secrets)+len(env))
	for _, name := range slices.Sorted(maps.Keys(secrets)) { // the same env every run
		if !own[name] {
			out = append(out, name+"="+secrets[name])
		}
	}
	return append(out, env...)
}
