package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"reflect"
	"sync"
	"syscall"
	"testing"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// ttySandbox is a host.Sandbox whose one process is ttyProc.
type ttySandbox struct {
	host.Sandbox // only Start is called
	proc         *ttyProc
	started      chan spec.Process
}

func (s *ttySandbox) Start(_ context.Context, p spec.Process) (host.Process, error) {
	s.started <- p
	return s.proc, nil
}

// ttyProc is a TTY process: its output is what the test writes to out; it
// records the resizes asked for.
type ttyProc struct {
	host.Process
	outR    *io.PipeReader
	out     *io.PipeWriter
	done    chan struct{}
	mu      sync.Mutex
	resizes [][2]uint16
}

func (p *ttyProc) Stdout() io.ReadCloser { return p.outR }
func (p *ttyProc) Stderr() io.ReadCloser { return io.NopCloser(bytes.NewReader(nil)) } // empty with a terminal
func (p *ttyProc) Stdin() io.WriteCloser { return nil }
func (p *ttyProc) Done() <-chan struct{} { return p.done }
func (p *ttyProc) Wait(context.Context) (spec.Result, error) {
	<-p.done
	return spec.Result{ExitCode: 3, Reason: string(lifecycle.ReasonExited)}, nil
}
func (p *ttyProc) Resize(_ context.Context, rows, cols uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resizes = append(p.resizes, [2]uint16{rows, cols})
	return nil
}
func (p *ttyProc) sizes() [][2]uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][2]uint16(nil), p.resizes...)
}

// TestRunInTTY: with -t, the process starts at the local terminal's size
// and each SIGWINCH becomes a Resize to the size then; its output (all on
// stdout) is copied out and its code returned. No terminal is needed: the
// size is read through termSize, replaced here.
func TestRunInTTY(t *testing.T) {
	var mu sync.Mutex
	size := [2]uint16{24, 80}
	old := termSize
	termSize = func(*os.File) (uint16, uint16, bool) {
		mu.Lock()
		defer mu.Unlock()
		return size[0], size[1], true
	}
	t.Cleanup(func() { termSize = old })

	r, w := io.Pipe()
	proc := &ttyProc{outR: r, out: w, done: make(chan struct{})}
	sb := &ttySandbox{proc: proc, started: make(chan spec.Process, 1)}
	var stdout, stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- runIn(context.Background(), sb, spec.Process{Argv: []string{"sh"}, TTY: true}, bytes.NewReader(nil), &stdout, &stderr)
	}()
	p := <-sb.started
	if !p.TTY || p.Rows != 24 || p.Cols != 80 {
		t.Fatalf("started with tty=%v %dx%d, want a 24x80 terminal", p.TTY, p.Rows, p.Cols)
	}
	mu.Lock()
	size = [2]uint16{40, 120}
	mu.Unlock()
	// The forwarding starts once the process runs: a SIGWINCH before it
	// is ignored (its default), so it is sent until one is seen.
	testutil.Eventually(t, "a resize forwarded", func() bool {
		if len(proc.sizes()) > 0 {
			return true
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
			t.Fatal(err)
		}
		return false
	})
	got := proc.sizes()
	if len(got) == 0 || got[0] != [2]uint16{40, 120} {
		t.Fatalf("resizes %v, want 40x120 first", got)
	}
	if _, err := w.Write([]byte("hello\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	close(proc.done)
	if c := <-code; c != 3 {
		t.Errorf("exit %d, want 3 (stderr %q)", c, stderr.String())
	}
	if stdout.String() != "hello\r\n" || stderr.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// TestLocalTTYNoTerminal: buffers are no terminal: the size is the
// kernel's default (0x0) and attach sets no raw mode; restore may be called
// twice.
func TestLocalTTYNoTerminal(t *testing.T) {
	tty := newLocalTTY(bytes.NewReader(nil), &bytes.Buffer{}, true)
	if tty.in != nil || tty.out != nil {
		t.Fatalf("a buffer taken for a terminal: %+v", tty)
	}
	if r, c := tty.size(); r != 0 || c != 0 {
		t.Errorf("size %dx%d, want 0x0", r, c)
	}
	proc := &ttyProc{done: make(chan struct{})}
	if err := tty.attach(proc); err != nil {
		t.Fatal(err)
	}
	if tty.state != nil {
		t.Error("raw mode set without a terminal")
	}
	tty.restore()
	tty.restore()
}

// TestClusters: -it is -i -t where flags are parsed, and nowhere else.
func TestClusters(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Bool("i", false, "")
	fs.Bool("t", false, "")
	fs.String("e", "", "")
	fs.Bool("json", false, "")
	for _, tc := range []struct{ in, want []string }{
		{[]string{"-it", "id"}, []string{"-i", "-t", "id"}},
		{[]string{"--ti", "id"}, []string{"--ti", "id"}},
		{[]string{"-e", "-it", "-ti"}, []string{"-e", "-it", "-t", "-i"}},
		{[]string{"-e=-it", "-it"}, []string{"-e=-it", "-i", "-t"}},
		{[]string{"-json", "-ie"}, []string{"-json", "-ie"}},
		{[]string{"id", "-it"}, []string{"id", "-it"}},
		{[]string{"--", "-it"}, []string{"--", "-it"}},
		{[]string{"-t=true", "-i"}, []string{"-t=true", "-i"}},
	} {
		if got := clusters(fs, tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("clusters(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
