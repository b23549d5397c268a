package core

import (
	"context"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// Attach hands fn process id's output from o.From on, recorded then live,
// until the process ends and its recording is whole (host.Process.Attach
// says what a caller gets). The output comes from the recording, never
// from the process's own streams: whoever holds those, or no one, an
// attach sees the same bytes, so any number of callers attach at once and
// a caller that crashed attaches again from where it stopped.
//
// It ends without the exit when ctx ends (cancelled), when the runtime
// closes (cancelled: the next runtime resumes the recording, and an attach
// to it goes on), or when the process's sandbox is no longer this
// runtime's to run (unreconciled: recovery could not reconcile it, and no
// one records its output).
func (rt *Runtime) Attach(ctx context.Context, id string, o host.AttachOptions, fn func(host.OutputChunk) error) (host.Attached, error) {
	var out host.Attached
	out.Result.ExitCode = -1
	st, err := rt.ReplayProcess(ctx, id, 0)
	if err != nil {
		return out, err
	}
	if o.From < 0 {
		return out, spec.Errorf(spec.CodeInvalidArgument, "runtime", "attach offset %d is negative: 0 is the beginning of the output", o.From)
	}
	if rt.recorder.Bounds(st.Spec.Record).Off {
		return out, spec.Errorf(spec.CodeUnsupported, "runtime", "process %s was started with recording off: its output went only to the caller that started it", id)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-rt.done:
			cancel()
		case <-actx.Done():
		}
	}()
	// Ended is asked only when the recording has nothing new: a journal
	// read, and no ask of an actor.
	ended := func() bool {
		p, err := rt.ReplayProcess(actx, id, 0)
		if err != nil || p.Terminal() {
			return true
		}
		_, err = rt.Sandbox(p.Sandbox)
		return err != nil // out of service or gone: no one records it
	}
	sum, err := rt.recorder.Follow(actx, id, recorder.FollowOptions{From: o.From, Ended: ended, Coalesce: attachChunk}, func(c recorder.Chunk) error {
		return fn(outputChunk(c))
	})
	out.Output = outputSummary(sum)
	if err != nil {
		select {
		case <-rt.done:
			if ctx.Err() == nil {
				return out, spec.Wrap(spec.CodeCancelled, "runtime", err, "the runtime closed while attached to process %s (a runtime opened on the journal goes on recording it)", id)
			}
		default:
		}
		return out, err
	}
	st, err = rt.ReplayProcess(ctx, id, 0)
	if err != nil {
		return out, err
	}
	res, ok := st.Result()
	if !ok {
		if _, serr := rt.Sandbox(st.Sandbox); serr != nil {
			return out, spec.Wrap(spec.CodeUnreconciled, "runtime", serr, "process %s has not ended, and its sandbox %s is not this runtime's to run: its output up to offset %d was handed out", id, st.Sandbox, o.From+out.Output.Recorded+out.Output.Missing)
		}
		return out, spec.Errorf(spec.CodeInternal, "runtime", "the recording of process %s ended before its exit was journaled", id)
	}
	out.Result = res // its typed error in it: the attach itself went well
	return out, nil
}

// attachChunk bounds the chunks an attach hands out: records of one stream
// joined up to it, so a served attach sends few large messages.
const attachChunk = 256 << 10
