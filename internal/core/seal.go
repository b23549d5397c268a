package core

import (
	"fmt"

	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/spec"
)

// sealEnded writes the end record of each recording in ids (Unsealed's)
// whose process's exit is journaled but whose runtime died before the end
// record (which follows the journaled exit) was written: without it the
// recording would read as torn for ever, since no process actor is left to
// end it. Open runs it before recovery starts any actor, then again on
// what is left for the processes recovery itself ended without their
// streams (a one-shot sandbox's, or a process given up as lost): those
// were unsealed before recovery too, so the directory is read once. A
// recording an actor still holds is skipped (Resume refuses it), and so is
// a warden's process whose sandbox is not removed: a reattach's stray
// drain ends it. It returns the ids it did not seal. A failure is logged:
// a recording is evidence, never a reason to refuse an Open.
func (rt *Runtime) sealEnded(ids []string) (left []string) {
	for _, id := range ids {
		p, err := recovery.FoldProcess(rt.journal, id)
		if err != nil || !p.Terminal() || p.Exit == nil {
			left = append(left, id) // running, suspended, or a stream retention removed
			continue
		}
		if p.ByWarden {
			// Its warden may still run it (a stray: ended in the journal,
			// never forgotten) and hold output past the journaled counts:
			// the reattach drains it into this recording and ends it. Only
			// once its sandbox is removed can nothing more come.
			if sb, err := recovery.FoldSandbox(rt.journal, p.Sandbox); err != nil || !sb.Terminal() {
				left = append(left, id)
				continue
			}
		}
		lost, err := rt.recorder.Seal(id, p.Exit.StdoutBytes, p.Exit.StderrBytes)
		if spec.IsCode(err, spec.CodeConflict) {
			left = append(left, id) // an actor holds it, or it was ended meanwhile
			continue
		}
		if err != nil {
			rt.log.Warn("sealing the recording of an ended process", "process", id, "err", err)
			continue
		}
		if lost > 0 {
			rt.log.Warn(fmt.Sprintf("the recording of ended process %s lacked %d bytes the journal counts; marked lost", id, lost), "process", id)
		}
	}
	return left
}
