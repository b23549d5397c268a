package stockade

import (
	"fmt"

	"github.com/stockade/stockade/spec"
)

// sealEnded writes the end record of every recording whose process's exit
// is journaled but whose runtime died before the end record (which follows
// the journaled exit) was written: without it the recording would read as
// torn for ever, since no process actor is left to end it. It runs before
// recovery starts any actor, and again after recovery for the processes
// recovery itself ended without their streams (a one-shot sandbox's, or a
// process given up as lost); a recording an actor still holds is skipped
// (Resume refuses it), and so is a warden's process whose sandbox is not
// removed: a reattach's stray drain ends it. A failure
// is logged: a recording is evidence, never a reason to refuse an Open.
func (rt *Runtime) sealEnded() {
	ids, err := rt.recorder.Unsealed()
	if err != nil {
		rt.log.Warn("listing unsealed recordings", "err", err)
		return
	}
	for _, id := range ids {
		p, err := foldProcess(rt.journal, id)
		if err != nil || !p.Terminal() || p.Exit == nil {
			continue // running, suspended, or a stream retention removed
		}
		if p.Warden {
			// Its warden may still run it (a stray: ended in the journal,
			// never forgotten) and hold output past the journaled counts:
			// the reattach drains it into this recording and ends it. Only
			// once its sandbox is removed can nothing more come.
			if sb, err := ReplaySandbox(rt.journal, p.Sandbox, 0); err != nil || !sb.Terminal() {
				continue
			}
		}
		lost, err := rt.recorder.Seal(id, p.Exit.StdoutBytes, p.Exit.StderrBytes)
		if spec.IsCode(err, spec.CodeConflict) {
			continue // an actor holds it, or it was ended meanwhile
		}
		if err != nil {
			rt.log.Warn("sealing the recording of an ended process", "process", id, "err", err)
			continue
		}
		if lost > 0 {
			rt.log.Warn(fmt.Sprintf("the recording of ended process %s lacked %d bytes the journal counts; marked lost", id, lost), "process", id)
		}
	}
}
