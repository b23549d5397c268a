// Package stockade embeds the stockade runtime. Program against rt.Host():
// the host.Runtime it returns is the API every Go host should use, the same
// one client.Dial gives over a server's socket, so the code runs against
// either. *Runtime's own methods are the embedded extras.
//
// The runtime runs untrusted commands in locked-down Docker containers
// (sandboxes) and never loses track of them. Every sandbox and process is
// an actor, and every state transition is journaled durably in a bbolt
// file before it is acted on or reported.
//
//	rt, err := stockade.Open(ctx, stockade.Options{})
//	defer rt.Close()
//	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: "stockade/toolbox:dev"})
//	p, err := sb.Start(ctx, spec.Process{Argv: []string{"id"}, Stdout: spec.Pipe, Stderr: spec.Pipe})
//	go io.Copy(os.Stderr, p.Stderr()) // every piped stream must be read
//	io.Copy(os.Stdout, p.Stdout())
//	res, err := p.Wait(ctx)
//	err = sb.Remove(ctx)
//
// A piped stream must be read: stdout and stderr of one process share one
// channel of the sandbox's warden link, so an unread stream blocks the other
// and, once its credit and the warden's window are used, the process itself
// (never another one). Use spec.Discard for output nobody reads.
//
// Errors are *spec.Error values with a code (errors.As, or errors.Is with a
// spec sentinel such as spec.ErrTimeout) wrapping their cause.
//
// Open recovers: it folds what the journal holds live, lists the Docker
// resources labelled with the journal's owner, and reconciles each sandbox
// by the recovery table of docs/design.md (roll back, stop and remove,
// re-adopt, tear down, record the exit, finish a stop or a removal; re-adopt
// a warden's running processes with their streams), journaling every
// decision with what was observed; orphans are removed. A sandbox recovery
// cannot observe, or whose journal stream (or one of its processes') does
// not fold, is listed (Sandboxes) as unreconciled and refused for new work,
// its journal untouched, while every other sandbox recovers; so is a
// sandbox whose actor failed under a live runtime. Nothing is silently
// dropped or resumed.
package stockade
