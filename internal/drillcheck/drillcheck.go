// Package drillcheck holds the crash drill's checks of what a journal and
// its recordings promise across a SIGKILL, read with no runtime on the
// journal (Read):
//
//   - at the kill (CheckAtKill): no recording has its end record while its
//     process's exit is not journaled;
//   - once every process has ended (CheckFinal): no process running at the
//     kill is journaled lost, unless recovery tore its sandbox down, and
//     every recording is complete or its gap journaled (CheckRecordings);
//   - the journal still replays (Replay).
//
// `stockade drill` (cmd/stockade) runs them on each drill's journal, around
// its checks of the recovered runtime; test/drill runs the final ones again
// on the journals the drill leaves.
package drillcheck

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/stockade/stockade/statedir"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// Proc is a process as its journal stream folds, with the output gaps
// journaled for it.
type Proc struct {
	lifecycle.Process
	gaps []lifecycle.OutputGap
}

// Fold folds the process events of a sandbox's history into procs.
func Fold(procs map[string]*Proc, h []host.HistoryEvent) error {
	var errs []error
	for _, e := range h {
		if e.Kind != string(journal.KindProcess) {
			continue
		}
		p := procs[e.ID]
		if p == nil {
			p = &Proc{Process: lifecycle.Process{ID: e.ID}}
			procs[e.ID] = p
		}
		ev, err := lifecycle.Decode(e.Type, e.Payload)
		if err == nil {
			p.Process, err = lifecycle.ApplyProcess(p.Process, e.Seq, e.Time, ev)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("process %s: %w", e.ID, err))
			continue
		}
		if g, ok := ev.(lifecycle.OutputGap); ok {
			p.gaps = append(p.gaps, g)
		}
	}
	return errors.Join(errs...)
}

// Journal is what a drill's journal and recordings hold at one moment
// (read with no runtime on the journal).
type Journal struct {
	procs map[string]*Proc
	recs  map[string]recordingEnd
}

// recordingEnd says how a process's recording ends.
type recordingEnd struct {
	found    bool
	complete bool
	end      int64 // the output offset where the recording stops
	err      error
}

// Read folds every process of the journal at jpath and reads how each
// one's recording ends. A journal that does not exist holds nothing (its
// runtime was killed before it made it).
func Read(jpath string) (Journal, error) {
	dj := Journal{procs: map[string]*Proc{}, recs: map[string]recordingEnd{}}
	if _, err := os.Stat(jpath); errors.Is(err, os.ErrNotExist) {
		return dj, nil // killed before its journal was made: nothing ran
	}
	j, err := journal.Open(jpath, journal.Options{ReadOnly: true})
	if err != nil {
		return dj, err
	}
	defer func() { _ = j.Close() }() // only read
	var sandboxes []string
	if err := j.Streams(func(k journal.Key) error {
		if k.Kind == journal.KindSandbox {
			sandboxes = append(sandboxes, k.ID)
		}
		return nil
	}); err != nil {
		return dj, err
	}
	for _, id := range sandboxes {
		h, err := inspect.New(j).History(context.Background(), id)
		if err != nil {
			return dj, err
		}
		if err := Fold(dj.procs, h); err != nil {
			return dj, err
		}
	}
	dir := statedir.Recordings(jpath)
	for id := range dj.procs {
		var re recordingEnd
		sum, err := recorder.Read(dir, id, func(c recorder.Chunk) error {
			re.end = c.Offset + int64(len(c.Data)) + c.Gap
			return nil
		})
		switch {
		case spec.IsCode(err, spec.CodeNotFound):
		case err != nil:
			re.found, re.err = true, err
		default:
			re.found, re.complete = true, sum.Complete
		}
		dj.recs[id] = re
	}
	return dj, nil
}

// CheckAtKill checks the journal as a kill left it: the end record follows
// the journaled exit, so no recording may say complete for a process whose
// exit the journal does not hold.
func (dj Journal) CheckAtKill(violate func(string, ...any)) {
	for id, re := range dj.recs {
		if re.complete && !dj.procs[id].Terminal() {
			violate("process %s: its recording has an end record at the kill while its exit is not journaled (%s)", id, dj.procs[id].Phase)
		}
	}
}

// running says the journal had the process started (or stopping) and not
// ended: it was running.
func running(p *Proc) bool {
	return p.Phase == lifecycle.PhaseStarted || p.Phase == lifecycle.PhaseStopping
}

// CheckFinal checks the promise once every process has ended: no process
// running at the kill (atKill) is journaled lost, unless recovery itself
// tore its sandbox down (tornDown: the decision by sandbox id; its caller
// is gone), and every recording keeps the promise (CheckRecordings). It
// returns notes for the drill's table.
func (dj Journal) CheckFinal(atKill Journal, tornDown map[string]string, violate func(string, ...any)) (notes []string) {
	for id, before := range atKill.procs {
		p := dj.procs[id]
		if !running(before) || p == nil || p.Exit == nil || p.Exit.Reason != lifecycle.ReasonLost {
			continue
		}
		if dec, ok := tornDown[p.Sandbox]; ok {
			notes = append(notes, fmt.Sprintf("process→lost in a sandbox recovery chose to %s", dec))
			continue
		}
		violate("process %s was running at the kill (%s) and is journaled lost: %s", id, before.Phase, p.Exit.Message)
	}
	return append(notes, dj.CheckRecordings(violate)...)
}

// CheckRecordings checks, once every process has ended, that every
// recording reads and ends complete (only for a process whose exit is
// journaled) or with the gap where it stops journaled, and that a process
// that printed has one. It returns notes for the drill's table.
func (dj Journal) CheckRecordings(violate func(string, ...any)) (notes []string) {
	for id, p := range dj.procs {
		re := dj.recs[id]
		switch {
		case re.err != nil:
			violate("the recording of process %s does not read: %v", id, re.err)
		case !re.found:
			if p.Group != 0 && p.Exit != nil && p.Exit.StdoutBytes+p.Exit.StderrBytes > 0 && !p.Spec.Record.Off {
				violate("process %s printed %d bytes and has no recording", id, p.Exit.StdoutBytes+p.Exit.StderrBytes)
			}
		case re.complete:
			if !p.Terminal() {
				violate("process %s: its recording is complete while its exit is not journaled (%s)", id, p.Phase)
			}
		case !p.ByWarden && p.ExecID != "" && p.Adopted && !gapAt(p.gaps, re.end):
			// A Docker exec cannot be re-attached: a process of a sandbox
			// without a warden that a recovery re-adopts runs on with its
			// recording stopped at the crash (README: "An exec of a
			// sandbox without a warden cannot be re-attached"). A real
			// runtime always has a warden; the drill's --no-warden mode
			// exists to reach process.exec-created.
			notes = append(notes, "exec process re-adopted without its stream (no warden)")
		case !gapAt(p.gaps, re.end):
			ended := "no exit journaled"
			if p.Exit != nil {
				ended = fmt.Sprintf("ended %s with %d bytes of output journaled", p.Exit.Reason, p.Exit.StdoutBytes+p.Exit.StderrBytes)
			}
			violate("the recording of process %s (%s) stops at byte %d without an end record, and no journaled gap covers it", id, ended, re.end)
		}
	}
	return notes
}

// gapAt says a journaled gap covers the output offset off.
func gapAt(gaps []lifecycle.OutputGap, off int64) bool {
	for _, g := range gaps {
		if g.From <= off && off < g.To {
			return true
		}
	}
	return false
}

// Replay opens the journal at path read-only, verifies it and folds every
// stream: every record decodes and no stream makes an illegal transition.
func Replay(path string) error {
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = j.Close() }() // only read
	return inspect.New(j).Verify(context.Background())
}
