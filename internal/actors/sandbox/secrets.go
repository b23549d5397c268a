package sandbox

import (
	"fmt"
	"maps"
	"strings"

	"github.com/stockade/stockade/spec"
)

// SetSecrets gives the values of the sandbox's secret variables again: a
// runtime opened after they were given does not have them (they are never
// journaled), and its processes are refused until it does. Secrets must
// name every one of the sandbox's, and no other; a Ref, when given, must
// be the journaled one.
type SetSecrets struct {
	Secrets []spec.SecretVar
	Reply   chan<- error
}

// valuesOf is secrets' values by name.
func valuesOf(secrets []spec.SecretVar) map[string]string {
	if len(secrets) == 0 {
		return nil
	}
	out := make(map[string]string, len(secrets))
	for _, s := range secrets {
		out[s.Name] = s.Value
	}
	return out
}

func (a *sandboxActor) setSecrets(m SetSecrets) error {
	want := a.state.Spec.Secrets
	if len(want) == 0 {
		return spec.Errorf(spec.CodeInvalidArgument, "sandbox", "sandbox %s has no secret variables to give", a.p.ID)
	}
	given := map[string]spec.SecretVar{}
	for _, s := range m.Secrets {
		if _, twice := given[s.Name]; twice {
			return spec.Errorf(spec.CodeInvalidArgument, "sandbox", "secret %s is given twice", s.Name)
		}
		given[s.Name] = s
	}
	for _, w := range want {
		g, ok := given[w.Name]
		switch {
		case !ok:
			return spec.Errorf(spec.CodeInvalidArgument, "sandbox", "secret %s (%s) of sandbox %s is not given: give every one of its secrets (%s)", w.Name, w.Ref, a.p.ID, secretNames(want))
		case g.Ref != "" && g.Ref != w.Ref:
			return spec.Errorf(spec.CodeInvalidArgument, "sandbox", "secret %s is given for ref %q, but sandbox %s journaled it as %q", w.Name, g.Ref, a.p.ID, w.Ref)
		}
		delete(given, w.Name)
	}
	for name := range given {
		return spec.Errorf(spec.CodeInvalidArgument, "sandbox", "secret %s is not one of sandbox %s's (%s)", name, a.p.ID, secretNames(want))
	}
	if err := (spec.Sandbox{Env: a.state.Spec.Env, Secrets: m.Secrets}).ValidateDefaults(); err != nil {
		return err
	}
	a.secrets = valuesOf(m.Secrets)
	return nil
}

// missingSecrets refuses a launch while a secret's value is not held.
func (a *sandboxActor) missingSecrets() error {
	var missing []spec.SecretVar
	for _, s := range a.state.Spec.Secrets {
		if _, ok := a.secrets[s.Name]; !ok {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s's secret variables %s are not held by this runtime (their values are never journaled, and it was opened after they were given): give them again with Sandbox.SetSecrets", a.p.ID, secretNames(missing))
}

// processSecrets are the values a new process gets (a copy: the process
// actor keeps its own).
func (a *sandboxActor) processSecrets() map[string]string { return maps.Clone(a.secrets) }

func secretNames(secrets []spec.SecretVar) string {
	parts := make([]string, len(secrets))
	for i, s := range secrets {
		parts[i] = s.Name
		if s.Ref != "" {
			parts[i] = fmt.Sprintf("%s (%s)", s.Name, s.Ref)
		}
	}
	return strings.Join(parts, ", ")
}
