package dockerio

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

// The Fake's execs: a scripted process per exec, its output as real
// multiplexed frames read through a framing.Decoder over a synchronous pipe
// (an unread stream blocks the "process" as it would for real), its group
// signalled by id, its end published as exec_die.

type fakeExec struct {
	sb       string // owner/id
	owner    string
	sandbox  string
	workload string // container id
	req      ExecRequest
	run      FakeRun
	started  bool
	done     bool
	exitCode int
	group    int
	kill     chan struct{}
	killOnce sync.Once
	sig      syscall.Signal
	phantom  bool // see FakeRun.Phantom126
}

func (f *Fake) CreateExec(ctx context.Context, sb Sandbox, req ExecRequest) (string, error) {
	if err := f.enter(ctx, "CreateExec"); err != nil {
		return "", err
	}
	if err := checkExecRequest(req); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.runningWorkload(sb)
	if err != nil {
		return "", err
	}
	run := FakeRun{}
	if f.Script != nil {
		run = f.Script(sb, req)
	}
	id := f.id("x")
	f.execs[id] = &fakeExec{sb: sb.Owner + "/" + sb.ID, owner: sb.Owner, sandbox: sb.ID, workload: s.sb.Workload, req: req, run: run, kill: make(chan struct{})}
	return id, nil
}

func (x *fakeExec) signal(sig syscall.Signal) {
	x.killOnce.Do(func() { x.sig = sig; close(x.kill) })
}

// fakeAttachment is the Fake's Attachment: a decoder over a pipe fed by
// the scripted process.
type fakeAttachment struct {
	dec     *framing.Decoder
	out     *io.PipeReader
	stdin   *io.PipeWriter
	group   int
	oom     int64
	closeMu sync.Once
	onClose func()
}

func (t *fakeAttachment) Next() (framing.StreamID, []byte, error) { return t.dec.Next() }

func (t *fakeAttachment) Stdin() io.Writer {
	if t.stdin == nil {
		return nil
	}
	return t.stdin
}

func (t *fakeAttachment) CloseStdin() error {
	if t.stdin == nil {
		return spec.Errorf(spec.CodeStreamFailure, "dockerio.stdin", "no stdin")
	}
	return t.stdin.Close()
}

func (t *fakeAttachment) Group() int { return t.group }

func (t *fakeAttachment) OOMKills() int64 { return t.oom }

func (t *fakeAttachment) Close() error {
	t.closeMu.Do(func() {
		if t.onClose != nil {
			t.onClose()
		}
		t.out.CloseWithError(io.ErrClosedPipe)
		if t.stdin != nil {
			t.stdin.CloseWithError(io.ErrClosedPipe)
		}
	})
	return nil
}

func (f *Fake) AttachExec(ctx context.Context, sb Sandbox, execID string, req ExecRequest) (Attachment, error) {
	if err := f.enter(ctx, "AttachExec"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	x, ok := f.execs[execID]
	if !ok {
		f.mu.Unlock()
		return nil, spec.Errorf(spec.CodeNotFound, "dockerio.fake", "exec %s", execID)
	}
	if x.started {
		f.mu.Unlock()
		return nil, spec.Errorf(spec.CodeConflict, "dockerio.fake", "exec %s already started", execID)
	}
	if err := f.pausedErr(x.sb); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	x.started = true
	failure := x.run.StartFailure
	if s, ok := f.sandboxes[x.sb]; ok && failure == "" && !s.hasDir(req.Spec.Dir) {
		failure = fmt.Sprintf("OCI runtime exec failed: chdir to cwd (%q) set in config.json failed: no such file or directory", req.Spec.Dir)
	}
	if failure != "" {
		x.done, x.exitCode = true, 127
		f.mu.Unlock()
		return nil, spec.Errorf(spec.CodeExecFailed, "dockerio.exec", "exit 127: %s", failure)
	}
	f.next++
	x.group = 100 + f.next
	var oom int64
	if s, ok := f.sandboxes[x.sb]; ok {
		oom = s.oomKills
	}
	f.mu.Unlock()

	pr, pw := io.Pipe()
	t := &fakeAttachment{out: pr, group: x.group, oom: oom, dec: framing.NewDecoder(pr, framing.Options{FrameLimit: spec.DefaultFrameLimit, ChunkSize: spec.DefaultReceiveChunk})}
	if x.run.Phantom126 {
		t.onClose = func() {
			f.mu.Lock()
			if !x.done {
				x.phantom = true
			}
			f.mu.Unlock()
		}
	}
	var in *io.PipeReader
	if req.Spec.Stdin {
		in, t.stdin = io.Pipe()
	}
	go f.runExec(x, execID, pw, in)
	if x.run.AttachLost {
		_ = t.Close() // the cut attach is the error reported
		return nil, spec.Errorf(spec.CodeEngine, "dockerio.exec", "exec %s: the attach connection was cut after the exec started", execID)
	}
	return t, nil
}

func (f *Fake) InspectExec(ctx context.Context, execID string) (ExecState, error) {
	if err := f.enter(ctx, "InspectExec"); err != nil {
		return ExecState{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	x, ok := f.execs[execID]
	if !ok {
		return ExecState{Known: false}, nil
	}
	st := ExecState{Known: true, Running: x.started && !x.done, Pid: x.group}
	if !st.Running && x.done {
		st.ExitCode = x.exitCode
	}
	if x.phantom {
		st.Running, st.ExitCode = false, 126
	}
	return st, nil
}

// ForgetExec drops an exec record, as the daemon does minutes after exit or
// on restart.
func (f *Fake) ForgetExec(execID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.execs, execID)
}

func (f *Fake) ReadGroup(ctx context.Context, sb Sandbox, processID string) (int, error) {
	if err := f.enter(ctx, "ReadGroup"); err != nil {
		return 0, err
	}
	if err := checkID("process", processID); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.pausedErr(sb.Owner + "/" + sb.ID); err != nil {
		return 0, err
	}
	if _, err := f.get(sb); err != nil {
		return 0, err
	}
	for _, x := range f.execs {
		if x.sb == sb.Owner+"/"+sb.ID && x.req.ProcessID == processID && x.group != 0 {
			return x.group, nil
		}
	}
	return 0, spec.Errorf(spec.CodeNotFound, "dockerio.group", "process %s: no group record", processID)
}

func (f *Fake) SignalGroup(ctx context.Context, sb Sandbox, pgid int, sig syscall.Signal) error {
	if err := f.enter(ctx, "SignalGroup"); err != nil {
		return err
	}
	if err := checkSignal(pgid, sig); err != nil {
		return err
	}
	f.mu.Lock()
	if err := f.pausedErr(sb.Owner + "/" + sb.ID); err != nil {
		f.mu.Unlock()
		return err
	}
	if _, err := f.get(sb); err != nil {
		f.mu.Unlock()
		return err
	}
	var target *fakeExec
	for _, x := range f.execs {
		if x.sb == sb.Owner+"/"+sb.ID && x.group == pgid && !x.done {
			target = x
		}
	}
	wardens := f.sandboxes[sb.Owner+"/"+sb.ID].wardens
	wardens = append([]*fakeWarden(nil), wardens...)
	f.mu.Unlock()
	if target == nil {
		// A warden's child (its warden may be gone: the runtime's kill
		// exec reaches the group all the same).
		if signalWardens(wardens, pgid, sig) {
			return nil
		}
		return spec.Errorf(spec.CodeNotFound, "dockerio.signal", "process group %d: no such process", pgid)
	}
	if sig != 0 {
		target.signal(sig)
	}
	return nil
}

// runExec is a fake exec's process: its frames, its stdin (echoed when
// asked), its hold, then its end (an exec_die to the owner's subscribers).
func (f *Fake) runExec(x *fakeExec, execID string, pw *io.PipeWriter, in *io.PipeReader) {
	enc := framing.NewEncoder(pw)
	code := x.run.ExitCode
	err := func() error {
		for _, fr := range x.run.Frames {
			if err := enc.WriteFrame(fr.Stream, fr.Data); err != nil {
				return err
			}
		}
		if in != nil {
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if n > 0 && x.run.EchoStdin {
					if err := enc.WriteFrame(framing.Stdout, buf[:n]); err != nil {
						return err
					}
				}
				if err != nil {
					break
				}
			}
		}
		if x.run.Hold != nil {
			select {
			case <-x.run.Hold:
			case <-x.kill:
				return nil
			}
		}
		for _, fr := range x.run.After {
			if err := enc.WriteFrame(fr.Stream, fr.Data); err != nil {
				return err
			}
		}
		return nil
	}()
	select {
	case <-x.kill:
		code = 128 + int(x.sig)
	default:
	}
	f.mu.Lock()
	if x.run.OOM {
		code = 128 + int(syscall.SIGKILL)
		if s, ok := f.sandboxes[x.sb]; ok {
			s.oomKills++
		}
	}
	x.done, x.exitCode = true, code
	if x.phantom {
		code = 127
	}
	f.mu.Unlock()
	pw.CloseWithError(err)
	if in != nil {
		_ = in.Close() // a pipe's Close never fails
	}
	f.publish(x.owner, ContainerEvent{Action: ActionExecDie, Container: x.workload, Sandbox: x.sandbox, Role: RoleWorkload, ExecID: execID, ExitCode: code})
}
