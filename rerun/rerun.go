// Package rerun re-runs a recorded sandbox session and compares the new
// run with the record, process by process.
//
// Run reads the original sandbox's History: its sandbox.reserved spec
// (pinned image ID, policy, datasets, env, dir, labels; a pooled
// sandbox's claim overrides env, dir and labels as it did at the time)
// and its processes, in the order their process.reserved events were
// journaled. It makes a new sandbox of the same spec, runs each recorded
// process in it one after the other (same argv, env, dir, TTY; the
// recorded stdin written, then closed), and compares per process: the
// exit (reason and code), stdout and stderr (sha256, and the first
// differing line), and the changes under /workspace journaled with each
// exit. A process that diverges (date, a random number) is reported as
// such and the re-run goes on: divergence is the report's, never an
// error of Run.
//
// The package sits on host (it drives any host.Runtime: embedded, served,
// or a fake) and reads recordings through the Recordings interface, so it
// links neither the actor system nor Docker.
package rerun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/textdiff"
)

// Recordings gives the recorded side of a session: each process's output
// and the stdin its caller sent. whole says nothing is missing (no gap in
// the recording, stdin not cut). A process with no recording is
// not_found (spec.CodeNotFound).
type Recordings interface {
	Output(processID string) (stdout, stderr []byte, whole bool, err error)
	Stdin(processID string) (data []byte, whole bool, err error)
}

// Options tune a re-run.
type Options struct {
	// Until, if positive, limits the re-run to the processes whose
	// process.reserved event stands at or before position Until of the
	// original sandbox's History (1-based, counting every event of the
	// sandbox and its processes in History's time order, as `stockade
	// journal show SB` lists them unfiltered). 0: every process. A
	// selected process is compared with its whole record, wherever its
	// exit stands.
	Until uint64
	// KeepSandbox keeps the new sandbox (stopped or not, as the re-run left
	// it) instead of removing it at the end.
	KeepSandbox bool
	// Timeout, if positive, bounds each re-run process (its spec's
	// Timeout; the recorded timeout applies otherwise). A process that
	// runs past it is stopped and reported with reason timeout.
	Timeout time.Duration
	// Secrets are the values of the original sandbox's secret variables
	// (spec.SecretVar: the journal keeps their names and refs, never their
	// values), by Name; a re-run of a sandbox that had any needs every
	// one given, and no other.
	Secrets []spec.SecretVar
}

// Report is a re-run's outcome.
type Report struct {
	// Original is the recorded sandbox; Rerun the new one (removed at the
	// end unless Options.KeepSandbox).
	Original string `json:"original"`
	Rerun    string `json:"rerun"`
	// Kept says the new sandbox was kept.
	Kept      bool            `json:"kept,omitempty"`
	Processes []ProcessReport `json:"processes"`
	// FirstDivergence is the original id of the first process that
	// diverged, "" when none did.
	FirstDivergence string `json:"first_divergence,omitempty"`
	Diverged        bool   `json:"diverged"`
	// Notes say what the re-run could not reproduce (a checkpoint it did
	// not start from, ...).
	Notes []string `json:"notes,omitempty"`
}

// ProcessReport compares one recorded process with its re-run.
type ProcessReport struct {
	// Original and Rerun are the process ids.
	Original string   `json:"original"`
	Rerun    string   `json:"rerun,omitempty"`
	Argv     []string `json:"argv"`
	// Position is where its process.reserved stands in the original
	// History (1-based; see Options.Until).
	Position int `json:"position"`
	// Same: every comparison below found no difference.
	Same    bool              `json:"same"`
	Exit    ExitComparison    `json:"exit"`
	Stdout  StreamComparison  `json:"stdout"`
	Stderr  StreamComparison  `json:"stderr"`
	Changes ChangesComparison `json:"changes"`
	// Notes say why a comparison is partial: a recording or a stdin that
	// is not whole, changes not tracked on one side.
	Notes []string `json:"notes,omitempty"`
}

// Outcome is how a process ended.
type Outcome struct {
	Reason   lifecycle.Reason `json:"reason"`
	ExitCode *int             `json:"exit_code,omitempty"`
	Error    spec.Code        `json:"error,omitempty"`
	Message  string           `json:"message,omitempty"`
}

// String is "exited 0", "timeout", "failed (not_found)".
func (o Outcome) String() string {
	s := string(o.Reason)
	if s == "" {
		s = "(no exit)"
	}
	if o.ExitCode != nil {
		s += fmt.Sprintf(" %d", *o.ExitCode)
	}
	if o.Error != "" {
		s += " (" + string(o.Error) + ")"
	}
	return s
}

// ExitComparison compares the reasons and exit codes.
type ExitComparison struct {
	Same     bool    `json:"same"`
	Recorded Outcome `json:"recorded"`
	Rerun    Outcome `json:"rerun"`
}

// Digest is a stream's size and sha256 (hex).
type Digest struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// MaxLineShown bounds the differing lines a StreamComparison quotes.
const MaxLineShown = 200

// StreamComparison compares a recorded stream with the re-run's.
type StreamComparison struct {
	Same bool `json:"same"`
	// Compared is false when there was nothing recorded to compare with
	// (recording off or removed); Same is then true and Note says why.
	Compared bool   `json:"compared"`
	Recorded Digest `json:"recorded"`
	Rerun    Digest `json:"rerun"`
	// Line is the first differing line (1-based); RecordedLine and
	// RerunLine are that line on each side (cut to MaxLineShown bytes),
	// nil where that side has no such line (its output ended before).
	Line         int     `json:"line,omitempty"`
	RecordedLine *string `json:"recorded_line,omitempty"`
	RerunLine    *string `json:"rerun_line,omitempty"`
	// Diff is a unified diff (package textdiff) from the recorded stream
	// to the re-run's, when both are at most MaxDiffBytes; over its
	// bounds it is textdiff's one-line summary.
	Diff string `json:"diff,omitempty"`
	Note string `json:"note,omitempty"`
}

// MaxDiffBytes bounds the streams a StreamComparison diffs line by line.
const MaxDiffBytes = 64 << 10

// ChangesComparison compares the changes under /workspace as sets of
// (op, path, from, kind, sha256), by path.
type ChangesComparison struct {
	Same bool `json:"same"`
	// Compared is false when either side has no tracked changes (a
	// journal from before changes were tracked, a process run by Docker
	// exec); Same is then true and Note says why.
	Compared bool `json:"compared"`
	// Missing: recorded, not made by the re-run. Extra: made by the
	// re-run only. Different: the same path, changed otherwise.
	Missing   []lifecycle.Change `json:"missing,omitempty"`
	Extra     []lifecycle.Change `json:"extra,omitempty"`
	Different []ChangePair       `json:"different,omitempty"`
	Note      string             `json:"note,omitempty"`
}

// ChangePair is a path changed differently by the two runs.
type ChangePair struct {
	Path     string           `json:"path"`
	Recorded lifecycle.Change `json:"recorded"`
	Rerun    lifecycle.Change `json:"rerun"`
}

// recorded is one process of the original session.
type recorded struct {
	id       string
	position int
	spec     spec.Process
	exit     *lifecycle.ProcessExited
}

// session is what the original History says.
type session struct {
	sandbox   spec.Sandbox
	processes []recorded
	// notes say what of the original the re-run does not reproduce.
	notes []string
}

// readSession folds the History of the original sandbox into its spec and
// its processes.
func readSession(evs []host.HistoryEvent, id string, until uint64) (session, error) {
	var s session
	found := false
	byID := map[string]int{}
	running := map[string]bool{} // selected processes reserved and not yet exited
	overlap, egress, rolled := false, false, false
	for i, e := range evs {
		switch {
		case e.Kind == "sandbox" && e.Type == (lifecycle.SandboxReserved{}).Type():
			var r lifecycle.SandboxReserved
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return s, spec.Wrap(spec.CodeJournal, "rerun", err, "decoding the sandbox.reserved of %s", id)
			}
			s.sandbox, found = r.Spec, true
		case e.Kind == "sandbox" && e.Type == (lifecycle.SandboxClaimed{}).Type():
			// A pooled sandbox took the claimant's env, dir and labels.
			var c lifecycle.SandboxClaimed
			if err := json.Unmarshal(e.Payload, &c); err != nil {
				return s, spec.Wrap(spec.CodeJournal, "rerun", err, "decoding the sandbox.claimed of %s", id)
			}
			s.sandbox.Env, s.sandbox.Dir, s.sandbox.Labels, s.sandbox.Secrets = c.Env, c.Dir, c.Labels, c.Secrets
		case e.Kind == "sandbox" && e.Type == (lifecycle.EgressChanged{}).Type():
			egress = true
		case e.Kind == "sandbox" && e.Type == (lifecycle.RolledBack{}).Type() && (until == 0 || uint64(i+1) <= until):
			rolled = true
		case e.Kind == "process" && e.Type == (lifecycle.ProcessReserved{}).Type():
			if until > 0 && uint64(i+1) > until {
				continue
			}
			var r lifecycle.ProcessReserved
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return s, spec.Wrap(spec.CodeJournal, "rerun", err, "decoding the process.reserved of %s", e.ID)
			}
			overlap = overlap || len(running) > 0
			running[e.ID] = true
			byID[e.ID] = len(s.processes)
			s.processes = append(s.processes, recorded{id: e.ID, position: i + 1, spec: r.Spec})
		case e.Kind == "process" && e.Type == (lifecycle.ProcessExited{}).Type():
			n, ok := byID[e.ID]
			if !ok {
				continue // past Until
			}
			var x lifecycle.ProcessExited
			if err := json.Unmarshal(e.Payload, &x); err != nil {
				return s, spec.Wrap(spec.CodeJournal, "rerun", err, "decoding the process.exited of %s", e.ID)
			}
			s.processes[n].exit = &x
			delete(running, e.ID)
		}
	}
	if overlap {
		s.notes = append(s.notes, "processes of the original ran at the same time; the re-run runs them one after the other, in the order they were reserved")
	}
	if egress {
		s.notes = append(s.notes, "the original's egress rules were changed while it ran; the re-run keeps the rules it was made with")
	}
	if rolled {
		s.notes = append(s.notes, "the original's workspace was rolled back to a checkpoint while it ran; the re-run does not roll back, so the processes after it may diverge")
	}
	if !found {
		return s, spec.Errorf(spec.CodeNotFound, "rerun", "sandbox %s has no sandbox.reserved in its history", id)
	}
	return s, nil
}

// secretsFor pairs the original's secret variables with the values given
// for them: every one needed (a re-run with an empty value would differ
// from the original for a reason no report could show), no other.
func secretsFor(id string, journaled, given []spec.SecretVar) ([]spec.SecretVar, error) {
	values := map[string]string{}
	for _, g := range given {
		values[g.Name] = g.Value
	}
	var out []spec.SecretVar
	var missing []string
	for _, j := range journaled {
		v, ok := values[j.Name]
		if !ok {
			missing = append(missing, fmt.Sprintf("%s (%s)", j.Name, j.Ref))
			continue
		}
		delete(values, j.Name)
		out = append(out, spec.SecretVar{Name: j.Name, Ref: j.Ref, Value: v})
	}
	if len(missing) > 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "rerun", "sandbox %s had secret variables whose values are never journaled: give %s (Options.Secrets; stockade replay --rerun --secret NAME, the value in the variable NAME)", id, strings.Join(missing, ", "))
	}
	for name := range values {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "rerun", "secret %s is not one of sandbox %s's", name, id)
	}
	return out, nil
}

// ran is what the re-run of one process gave.
type ran struct {
	id             string
	stdout, stderr []byte
	outcome        Outcome
	notes          []string
}

// Run re-runs the session of sandboxID recorded in rt's journal (see the
// package doc) and compares. The error is Run's own (the history cannot
// be read, the new sandbox cannot be made, a process cannot be fed, the
// context ends); the new sandbox is removed on every path unless
// opts.KeepSandbox, and a failure to remove it is joined to the error.
func Run(ctx context.Context, rt host.Runtime, sandboxID string, rec Recordings, opts Options) (rep Report, err error) {
	rep.Original = sandboxID
	evs, err := rt.History(ctx, sandboxID)
	if err != nil {
		return rep, spec.Wrap(spec.CodeOf(err), "rerun", err, "reading the history of %s", sandboxID)
	}
	sess, err := readSession(evs, sandboxID, opts.Until)
	if err != nil {
		return rep, err
	}
	rep.Notes = sess.notes
	orig := sess.sandbox
	labels := maps.Clone(orig.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelRerunOf] = sandboxID
	secrets, err := secretsFor(sandboxID, orig.Secrets, opts.Secrets)
	if err != nil {
		return rep, err
	}
	ss := spec.Sandbox{
		Secrets:  secrets,
		Image:    orig.Image,
		Policy:   orig.Policy,
		Datasets: orig.Datasets,
		Lifetime: spec.Kept,
		Env:      orig.Env,
		Dir:      orig.Dir,
		Labels:   labels,
		// The checkpoint the original started from, if any: the re-run
		// starts from the same workspace.
		From: orig.From,
	}
	sb, err := rt.CreateSandbox(ctx, ss)
	if err != nil {
		return rep, spec.Wrap(spec.CodeOf(err), "rerun", err, "making the sandbox to re-run %s in", sandboxID)
	}
	rep.Rerun = sb.ID()
	defer func() {
		if opts.KeepSandbox {
			rep.Kept = true
			return
		}
		// Removed even when ctx ended: the sandbox is ours to clean up.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if rerr := sb.Remove(rctx); rerr != nil {
			err = errors.Join(err, spec.Wrap(spec.CodeOf(rerr), "rerun", rerr, "removing the re-run sandbox %s", sb.ID()))
		}
	}()
	runs := make([]ran, 0, len(sess.processes))
	for _, p := range sess.processes {
		r, err := runOne(ctx, sb, p, rec, opts)
		if err != nil {
			return rep, err
		}
		runs = append(runs, r)
	}
	// The new processes' exits, as journaled: the changes come only from
	// there.
	newEvs, err := rt.History(ctx, sb.ID())
	if err != nil {
		return rep, spec.Wrap(spec.CodeOf(err), "rerun", err, "reading the history of the re-run sandbox %s", sb.ID())
	}
	exits := map[string]*lifecycle.ProcessExited{}
	for _, e := range newEvs {
		if e.Kind == "process" && e.Type == (lifecycle.ProcessExited{}).Type() {
			var x lifecycle.ProcessExited
			if err := json.Unmarshal(e.Payload, &x); err != nil {
				return rep, spec.Wrap(spec.CodeJournal, "rerun", err, "decoding the process.exited of %s", e.ID)
			}
			exits[e.ID] = &x
		}
	}
	for i, p := range sess.processes {
		pr, err := compare(p, runs[i], exits[runs[i].id], rec)
		if err != nil {
			return rep, err
		}
		if !pr.Same && !rep.Diverged {
			rep.Diverged, rep.FirstDivergence = true, p.id
		}
		rep.Processes = append(rep.Processes, pr)
	}
	return rep, nil
}

// LabelRerunOf labels the new sandbox with the id of the one it re-runs.
const LabelRerunOf = "stockade.rerun-of"

// removeTimeout bounds the removal of the new sandbox after ctx ended.
const removeTimeout = time.Minute

// runOne runs one recorded process in sb. A process that fails to start
// (not found, refused) is an outcome to compare, not an error; an error
// is the context's, or feeding its stdin's.
func runOne(ctx context.Context, sb host.Sandbox, p recorded, rec Recordings, opts Options) (ran, error) {
	var r ran
	ps := p.spec
	// Both streams piped: the comparison needs the bytes even where the
	// original discarded them (the recorder kept them anyway).
	ps.Stdout, ps.Stderr = spec.Pipe, spec.Pipe
	if opts.Timeout > 0 {
		ps.Timeout = opts.Timeout
	}
	var stdin []byte
	if ps.Stdin {
		data, whole, err := rec.Stdin(p.id)
		switch {
		case spec.IsCode(err, spec.CodeNotFound):
			r.notes = append(r.notes, "the original's stdin was not recorded: the re-run got an empty stdin")
		case err != nil:
			return r, spec.Wrap(spec.CodeOf(err), "rerun", err, "reading the recorded stdin of %s", p.id)
		case !whole:
			r.notes = append(r.notes, fmt.Sprintf("the original's stdin recording is cut: the re-run got its first %d bytes", len(data)))
		}
		stdin = data
	}
	proc, err := sb.Start(ctx, ps)
	if err != nil {
		if ctx.Err() != nil {
			return r, spec.Wrap(spec.CodeCancelled, "rerun", ctx.Err(), "re-running %s", p.id)
		}
		r.outcome = Outcome{Reason: lifecycle.ReasonFailed, Error: spec.CodeOf(err), Message: err.Error()}
		return r, nil
	}
	r.id = proc.ID()
	var wg sync.WaitGroup
	var outErr, errErr, inErr error
	read := func(rc io.ReadCloser, dst *[]byte, e *error) {
		defer wg.Done()
		if rc == nil {
			return
		}
		defer func() { _ = rc.Close() }() // read to its end; nothing to lose
		*dst, *e = io.ReadAll(rc)
	}
	wg.Add(2)
	go read(proc.Stdout(), &r.stdout, &outErr)
	go read(proc.Stderr(), &r.stderr, &errErr)
	if w := proc.Stdin(); w != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, inErr = w.Write(stdin)
			if cerr := w.Close(); inErr == nil {
				inErr = cerr
			}
		}()
	}
	// A re-run given up (ctx) lets go of the process's streams: a
	// descendant that holds them open would keep the readers above
	// waiting for ever.
	stop := context.AfterFunc(ctx, func() {
		for _, c := range []io.Closer{proc.Stdout(), proc.Stderr(), proc.Stdin()} {
			if c != nil {
				_ = c.Close() // given up: what is unread stays in the recording
			}
		}
	})
	defer stop()
	res, werr := proc.Wait(ctx)
	wg.Wait()
	if ctx.Err() != nil {
		return r, spec.Wrap(spec.CodeCancelled, "rerun", ctx.Err(), "re-running %s", p.id)
	}
	if inErr != nil {
		// A process that exits without reading all its stdin breaks the
		// pipe: an outcome, noted, not a failure of the re-run.
		r.notes = append(r.notes, "writing the recorded stdin: "+inErr.Error())
	}
	for _, e := range []error{outErr, errErr} {
		if e != nil {
			r.notes = append(r.notes, "reading the re-run's output: "+e.Error())
		}
	}
	r.outcome = Outcome{Reason: lifecycle.Reason(res.Reason)}
	if res.ExitCode >= 0 && res.Reason == string(lifecycle.ReasonExited) {
		code := res.ExitCode
		r.outcome.ExitCode = &code
	}
	if werr != nil {
		r.outcome.Error, r.outcome.Message = spec.CodeOf(werr), werr.Error()
	}
	return r, nil
}

// compare builds a process's report from the record and the re-run; x is
// the re-run process's journaled exit (nil: none found).
func compare(p recorded, r ran, x *lifecycle.ProcessExited, rec Recordings) (ProcessReport, error) {
	pr := ProcessReport{Original: p.id, Rerun: r.id, Argv: p.spec.Argv, Position: p.position, Notes: r.notes}
	// Exit.
	pr.Exit.Recorded = Outcome{Reason: "", ExitCode: nil}
	if p.exit != nil {
		pr.Exit.Recorded = Outcome{Reason: p.exit.Reason, ExitCode: p.exit.ExitCode, Error: p.exit.Error, Message: p.exit.Message}
	} else {
		pr.Notes = append(pr.Notes, "the original has no exit in the journal (still running, or left by a crash)")
	}
	pr.Exit.Rerun = r.outcome
	if x != nil {
		// The journal's word over the Wait's: the same source as the
		// record's.
		pr.Exit.Rerun = Outcome{Reason: x.Reason, ExitCode: x.ExitCode, Error: x.Error, Message: x.Message}
	}
	pr.Exit.Same = pr.Exit.Recorded.Reason == pr.Exit.Rerun.Reason && eqCode(pr.Exit.Recorded.ExitCode, pr.Exit.Rerun.ExitCode)
	// Streams.
	out, errs, whole, err := rec.Output(p.id)
	switch {
	case spec.IsCode(err, spec.CodeNotFound):
		note := "no recorded output (recording off, or removed by retention): not compared"
		pr.Stdout = StreamComparison{Same: true, Rerun: digest(r.stdout), Note: note}
		pr.Stderr = StreamComparison{Same: true, Rerun: digest(r.stderr), Note: note}
	case err != nil:
		return pr, spec.Wrap(spec.CodeOf(err), "rerun", err, "reading the recorded output of %s", p.id)
	default:
		pr.Stdout = compareStream(out, r.stdout)
		pr.Stderr = compareStream(errs, r.stderr)
		if !whole {
			note := "the recording is not whole (bytes past its bounds, or lost): a difference may be the recording's"
			pr.Stdout.Note, pr.Stderr.Note = note, note
			pr.Notes = append(pr.Notes, "the original's output recording is not whole")
		}
	}
	// Changes.
	var newChanges *lifecycle.Changes
	if x != nil {
		newChanges = x.Changes
	}
	var oldChanges *lifecycle.Changes
	if p.exit != nil {
		oldChanges = p.exit.Changes
	}
	pr.Changes = compareChanges(oldChanges, newChanges)
	pr.Same = pr.Exit.Same && pr.Stdout.Same && pr.Stderr.Same && pr.Changes.Same
	return pr, nil
}

func eqCode(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func digest(b []byte) Digest {
	sum := sha256.Sum256(b)
	return Digest{Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// compareStream compares by sha256 and, when they differ, finds the first
// differing line.
func compareStream(rec, now []byte) StreamComparison {
	c := StreamComparison{Compared: true, Recorded: digest(rec), Rerun: digest(now)}
	if c.Recorded == c.Rerun {
		c.Same = true
		return c
	}
	a, b := lines(rec), lines(now)
	i := 0
	for i < len(a) && i < len(b) && bytes.Equal(a[i], b[i]) {
		i++
	}
	c.Line = i + 1
	if len(rec) <= MaxDiffBytes && len(now) <= MaxDiffBytes {
		c.Diff = textdiff.Unified("output", string(rec), string(now))
	}
	if i < len(a) {
		s := cut(a[i])
		c.RecordedLine = &s
	}
	if i < len(b) {
		s := cut(b[i])
		c.RerunLine = &s
	}
	return c
}

// lines splits output into lines, each with its "\n" (so "a" and "a\n"
// differ on their last line).
func lines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	ls := bytes.SplitAfter(b, []byte("\n"))
	if len(ls[len(ls)-1]) == 0 {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// cut is a quoted line: at most MaxLineShown bytes, marked when cut. It
// is the sandbox's text: the caller escapes it for a terminal.
func cut(b []byte) string {
	if len(b) > MaxLineShown {
		return string(b[:MaxLineShown]) + "…"
	}
	return string(b)
}

// changeKey is what makes two changes the same.
type changeKey struct{ op, path, from, kind, sha string }

func keyOf(c lifecycle.Change) changeKey {
	return changeKey{c.Op, c.Path, c.From, c.Kind, c.SHA256}
}

// compareChanges compares two processes' changes by path.
func compareChanges(rec, now *lifecycle.Changes) ChangesComparison {
	var c ChangesComparison
	switch {
	case rec == nil || now == nil:
		c.Same, c.Note = true, "changes not tracked on "+side(rec == nil, now == nil)+": not compared"
		return c
	case rec.Untracked != "" || now.Untracked != "":
		c.Same, c.Note = true, "changes not tracked ("+strings.Trim(rec.Untracked+"; "+now.Untracked, "; ")+"): not compared"
		return c
	}
	c.Compared = true
	old := map[string]lifecycle.Change{}
	for _, e := range rec.Entries {
		old[e.Path] = e
	}
	seen := map[string]bool{}
	for _, e := range now.Entries {
		seen[e.Path] = true
		o, ok := old[e.Path]
		switch {
		case !ok:
			c.Extra = append(c.Extra, e)
		case keyOf(o) != keyOf(e):
			c.Different = append(c.Different, ChangePair{Path: e.Path, Recorded: o, Rerun: e})
		}
	}
	for _, e := range rec.Entries {
		if !seen[e.Path] {
			c.Missing = append(c.Missing, e)
		}
	}
	slices.SortFunc(c.Missing, func(a, b lifecycle.Change) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(c.Extra, func(a, b lifecycle.Change) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(c.Different, func(a, b ChangePair) int { return strings.Compare(a.Path, b.Path) })
	countsDiffer := rec.Created != now.Created || rec.Modified != now.Modified || rec.Deleted != now.Deleted || rec.Renamed != now.Renamed
	c.Same = len(c.Missing)+len(c.Extra)+len(c.Different) == 0 && !countsDiffer
	var notes []string
	if countsDiffer && len(c.Missing)+len(c.Extra)+len(c.Different) == 0 {
		notes = append(notes, fmt.Sprintf("counts differ (%d changes recorded, %d re-run) beyond the listed entries", rec.Total(), now.Total()))
	}
	for _, s := range []struct {
		name string
		ch   *lifecycle.Changes
	}{{"the original's", rec}, {"the re-run's", now}} {
		if s.ch.Incomplete != "" {
			notes = append(notes, s.name+" list is incomplete: "+s.ch.Incomplete)
		}
		if s.ch.Omitted > 0 {
			notes = append(notes, fmt.Sprintf("%s list omits %d changes", s.name, s.ch.Omitted))
		}
	}
	c.Note = strings.Join(notes, "; ")
	return c
}

func side(rec, now bool) string {
	switch {
	case rec && now:
		return "either side"
	case rec:
		return "the original"
	}
	return "the re-run"
}
