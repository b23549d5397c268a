package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/spec"
)

// openPTY opens a pseudo-terminal pair: the test's stand-in for the user's
// terminal (the replica side is what stockade would have as stdin/stdout).
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = ptm.Close() }) // teardown
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("naming the pseudo-terminal: %v", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the pseudo-terminal's replica: %v", err)
	}
	t.Cleanup(func() { _ = pts.Close() }) // teardown
	return ptm, pts
}

func termios(t *testing.T, f *os.File) unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return *tio
}

// TestRunInRawTerminal: on a real (pseudo-)terminal, -t -i starts the
// process at the terminal's size, holds the terminal raw while the process
// runs, and gives it back its mode once it ends, before any message.
func TestRunInRawTerminal(t *testing.T) {
	ptm, pts := openPTY(t)
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 99}); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, ptm) }() // what the process writes to the terminal
	before := termios(t, pts)
	if before.Lflag&unix.ICANON == 0 {
		t.Fatal("a fresh pseudo-terminal is not canonical")
	}
	r, w := io.Pipe()
	proc := &ttyProc{outR: r, out: w, done: make(chan struct{})}
	sb := &ttySandbox{proc: proc, started: make(chan spec.Process, 1)}
	code := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		code <- runIn(context.Background(), sb, spec.Process{Argv: []string{"sh"}, TTY: true, Stdin: true}, pts, pts, &stderr)
	}()
	p := <-sb.started
	if p.Rows != 33 || p.Cols != 99 {
		t.Errorf("started at %dx%d, want the terminal's 33x99", p.Rows, p.Cols)
	}
	// Raw once the process runs: its first output is copied after attach.
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if during := termios(t, pts); during.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("the terminal is not raw while the process runs: lflag %#x", during.Lflag)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	close(proc.done)
	if c := <-code; c != 3 {
		t.Errorf("exit %d (stderr %q)", c, stderr.String())
	}
	if after := termios(t, pts); after != before {
		t.Errorf("the terminal's mode was not restored:\n got %+v\nwant %+v", after, before)
	}
}
