package main

import (
	"context"
	"io"
	"math"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/stockade/stockade/host"
)

// localTTY is the local side of a process run with -t: the size of the
// terminal on stdout (the process's terminal starts at it and follows it on
// SIGWINCH) and, with -i and a terminal on stdin, raw mode on stdin for the
// process's life, so each key goes to the process's terminal as typed
// (Ctrl-C included: it interrupts the process's foreground job, not
// stockade).
//
// Neither needs a terminal: with stdout not a terminal the process's
// terminal keeps the kernel's default size (0x0, which most programs read as
// 80x24) and nothing follows; with stdin not a terminal (a pipe, a file) it
// is forwarded as it is, without raw mode.
type localTTY struct {
	in, out *os.File // nil when not a terminal
	raw     bool     // -i: put in into raw mode
	once    sync.Once
	state   *term.State
	stop    func()
}

// termSize reads the size of the terminal f (rows, cols), ok false when f
// is none. A variable for the tests, which have no terminal.
var termSize = func(f *os.File) (rows, cols uint16, ok bool) {
	if f == nil {
		return 0, 0, false
	}
	w, h, err := term.GetSize(int(f.Fd()))
	if err != nil || w <= 0 || h <= 0 {
		return 0, 0, false
	}
	return uint16(min(h, math.MaxUint16)), uint16(min(w, math.MaxUint16)), true
}

// newLocalTTY looks at the command's stdin and stdout; stdinWanted is -i.
func newLocalTTY(stdin io.Reader, stdout io.Writer, stdinWanted bool) *localTTY {
	t := &localTTY{raw: stdinWanted, stop: func() {}}
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		t.in = f
	}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		t.out = f
	}
	return t
}

// size is the terminal's current size, or 0x0 (the kernel's default).
func (t *localTTY) size() (rows, cols uint16) {
	rows, cols, _ = termSize(t.out)
	return rows, cols
}

// attach puts stdin into raw mode (with -i, when it is a terminal) and
// forwards SIGWINCH as Resize until the process ends or restore is called.
// It fails only when raw mode cannot be set.
func (t *localTTY) attach(proc host.Process) error {
	if t.raw && t.in != nil {
		st, err := term.MakeRaw(int(t.in.Fd()))
		if err != nil {
			return err
		}
		t.state = st
	}
	if len(winch) == 0 {
		return nil
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, winch...)
	quit := make(chan struct{})
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for {
			select {
			case <-sigs:
			case <-proc.Done():
				return
			case <-quit:
				return
			}
			rows, cols, ok := termSize(t.out)
			if !ok {
				continue
			}
			// A resize that fails (the process is ending) changes nothing
			// worth a message on a screen the process owns.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = proc.Resize(ctx, rows, cols)
			cancel()
		}
	}()
	t.stop = func() {
		signal.Stop(sigs)
		close(quit)
		done.Wait()
	}
	return nil
}

// restore stops forwarding SIGWINCH and gives the terminal back its mode.
// It is safe to call more than once (every exit path calls it).
func (t *localTTY) restore() {
	t.once.Do(func() {
		t.stop()
		if t.state != nil {
			// Best effort, unreported: a message would land on the
			// terminal it failed to give back.
			_ = term.Restore(int(t.in.Fd()), t.state)
		}
	})
}
