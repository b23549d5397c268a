package sandbox

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
	"github.com/stockade/stockade/warden/wire"
)

// The warden part's reattach (warden.go): a re-adopted sandbox's warden,
// which an earlier runtime left running, is linked to again with the
// journaled secret, and its process table read: the recovering actors of
// its processes are spawned with their entries (recoveryPart.spawnAdopted),
// and the processes the journal has already ended are drained and
// forgotten (forgetStray).

type reattached struct {
	link  *link.Link
	table []wire.Entry
	err   error
}

// reattachKey holds a re-adopted sandbox's settling until its warden's
// processes are spawned.
const reattachKey = "\x00warden"

// wardenProcess reports whether a journaled process is (or may be) the
// warden's: started by it, or reserved in a sandbox with a warden (the
// spawn request may have reached it).
func wardenProcess(p lifecycle.Process, s lifecycle.Sandbox) bool {
	return p.ByWarden || p.ExecID == "" && p.Phase == lifecycle.PhaseReserved && s.Warden != nil
}

// reattach makes a new link to the warden an earlier runtime left running
// (through `stockade-warden attach` on its socket, authenticated by the
// journaled secret) and reads its process table, off the mailbox.
func (w *wardenPart) reattach() {
	a := w.a
	ws := *a.state.Warden
	w.gen++
	w.starting = true
	sb, eng, log, id := a.sb, a.engine, a.deps.Log, a.p.ID
	a.goDocker(func(ctx context.Context) any {
		secret, err := wire.DecodeHex(ws.Secret, wire.SecretSize)
		if err != nil {
			return reattached{err: spec.Wrap(spec.CodeJournal, "sandbox.warden", err, "the journaled warden secret")}
		}
		if err := eng.EnsureWarden(ctx, sb); err != nil {
			return reattached{err: err}
		}
		// The bridge says on stderr why it connected nothing (a listener
		// that is not the warden): that reason, not the EOF the handshake
		// saw, is the warden's loss.
		stderr := wardenStderr(log, id, "warden attach")
		conn, err := eng.AttachWarden(ctx, sb, ws.Socket, stderr)
		if err != nil {
			return reattached{err: err}
		}
		link, _, err := link.Open(ctx, conn.R, conn.W, conn.C, link.Handshake{Secret: secret, Reattach: true})
		if err != nil {
			if last := stderr.Last(); last != "" {
				err = fmt.Errorf("%w (the bridge: %s)", err, last)
			}
			return reattached{err: err}
		}
		table, err := link.List(ctx)
		if err != nil {
			_ = link.Close() // the List error is the one to report
			return reattached{err: err}
		}
		return reattached{link: link, table: table}
	})
}

// onReattached spawns the recovering actors of the warden's processes,
// each with its table entry (or why there is none), and keeps the link for
// new work. A warden that cannot be reattached is journaled lost.
func (w *wardenPart) onReattached(ctx actor.Context, m reattached) {
	a := w.a
	w.starting = false
	failpoint.Hit(failpoint.RecoveryReattached)
	pending := w.pendingAdopt
	w.pendingAdopt = nil
	var gone error
	entries := map[string]wire.Entry{}
	if m.err != nil {
		gone = m.err
		w.reattachFailed = true
		a.deps.Log.Warn("reattaching the sandbox's warden failed; its processes are lost", "sandbox", a.p.ID, "err", m.err)
		if ws := a.state.Warden; ws != nil {
			if err := a.record(lifecycle.WardenLost{Reason: "reattach failed: " + m.err.Error()}); err != nil {
				a.deps.Log.Warn("journaling the warden's loss failed", "sandbox", a.p.ID, "err", err)
			}
			// It may still run (it refused the journal's secret: a
			// claim's rekey cut by a crash): a sandbox runs one warden.
			w.retire(*ws)
		}
	} else {
		w.link = m.link
		gen, link := w.gen, m.link
		go func() {
			<-link.Done()
			a.send(wardenDown{gen: gen, err: link.Err()})
		}()
		for _, e := range m.table {
			entries[e.ID] = e
		}
	}
	for _, p := range pending {
		params := a.recovery.adoptParams(p)
		if gone != nil {
			params.WardenGone = gone
		} else if e, ok := entries[p.ID]; ok {
			params.Link, params.Entry = m.link, &e
			delete(entries, p.ID)
		} else {
			params.Link = m.link
		}
		a.recovery.spawnAdopted(ctx, p, params)
	}
	// Left in the table: processes the journal has already ended (their
	// exit journaled before the warden was told to forget them). Drain and
	// forget them; kill any that still runs.
	if len(entries) > 0 && w.strays == nil {
		w.strays, w.stopStrays = context.WithCancel(context.Background())
	}
	for _, e := range entries {
		go w.forgetStray(w.strays, m.link, e)
	}
	a.recovery.adopted(reattachKey)
	// The list is taken before the launches go on: one the failed
	// reattach sends to a new warden is held again, in a fresh list.
	held := w.held
	w.held = nil
	for _, l := range held {
		a.launch(ctx, l)
	}
}

// strayWait bounds how long a stray is drained and awaited.
const strayWait = time.Minute

// forgetStray settles a process the warden still lists but the journal has
// already ended (its exit was journaled before the warden was told to
// forget it): it is killed if it runs, what it printed since its
// recording's end is recorded like any process's output (resumed from the
// recording's offset, at most the output quota), and the warden forgets
// it once it reports the exit. It gives up when ctx ends (the actor
// stops), after strayWait, or at the quota; a recording not ended then is
// suspended, not called complete.
func (w *wardenPart) forgetStray(ctx context.Context, link *link.Link, e wire.Entry) {
	a := w.a
	ctx, cancel := context.WithTimeout(ctx, strayWait)
	defer cancel()
	log := a.deps.Log.With("sandbox", a.p.ID, "process", e.ID)
	var rec *recorder.Recording
	from := e.Acked
	if a.deps.Recorder != nil {
		r, off, err := a.deps.Recorder.Resume(e.ID, spec.Record{})
		switch {
		case err != nil:
			log.Warn("the recording of a stray process cannot be resumed; what it printed since goes unrecorded", "err", err)
		case uint64(off) > e.Output:
			log.Warn("the recording of a stray process holds more than the warden read; it is left as it is", "recorded", off, "warden", e.Output)
			if err := r.Suspend(); err != nil {
				log.Warn("suspending a stray process's recording failed", "err", err)
			}
		default:
			rec, from = r, max(from, uint64(off))
			if lost := int64(from) - off; lost > 0 {
				// The warden dropped bytes it was told were recorded and
				// the disk does not hold (a crash cut their write): mark
				// them lost in place, never splice over them. The process
				// is ended in the journal, whose fold takes no gap after
				// the exit: the recording says it.
				log.Warn("a stray's recording lacks bytes its warden dropped; marked lost in place", "recorded", off, "acked", from)
				if _, err := rec.Gap(lost); err != nil {
					log.Warn("marking a stray's lost bytes failed", "err", err)
				}
			}
		}
	}
	p, err := link.Resume(ctx, e, from)
	if err != nil {
		log.Warn("a stray process could not be resumed to be forgotten", "err", err)
		if err := rec.Suspend(); err != nil {
			log.Warn("suspending a stray process's recording failed", "err", err)
		}
		return
	}
	defer p.Close()
	stop := context.AfterFunc(ctx, p.Close) // Next returns once ctx ends
	defer stop()
	if e.Running {
		if err := p.Signal(syscall.SIGKILL); err != nil {
			// The link is gone or ctx ended: Next below returns at once.
			log.Warn("killing a stray process failed", "err", err)
		}
	}
	quota := a.deps.Config.OutputQuota
	var n int64
	for n <= quota {
		stream, data, err := p.Next()
		if err != nil {
			break
		}
		n += int64(len(data))
		if err := rec.Write(stream, data); err != nil {
			log.Warn("recording a stray process's output failed", "err", err)
		}
	}
	if n > quota {
		log.Warn("a stray process printed more than its output quota; the rest is not read", "bytes", n, "quota", quota)
	}
	select {
	case <-p.Exited():
	case <-ctx.Done():
	}
	ex, exited := p.Exit()
	if !exited || ctx.Err() != nil || n > quota {
		// Not drained to its end: the recording is suspended (a later
		// reattach resumes it), and the warden keeps the process.
		log.Warn("a stray process was not drained to its end; the warden keeps it", "exited", exited, "err", ctx.Err())
		if err := rec.Suspend(); err != nil {
			log.Warn("suspending a stray process's recording failed", "err", err)
		}
		return
	}
	rec.SetTotals(int64(ex.Stdout), int64(ex.Stderr))
	if err := rec.Close(); err != nil {
		log.Warn("closing a stray process's recording failed", "err", err)
	}
	if err := p.Forget(); err != nil {
		log.Warn("the warden could not be told to forget a stray process", "err", err)
	}
}
