package main

import (
	"fmt"
	"io"

	"github.com/stockade/stockade/spec"
)

// printer writes a command's output piecemeal and keeps the first write
// error, checked once at the end: a stdout that is closed or full fails
// the command instead of losing its output silently. After an error it
// writes nothing more.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

// The write error of these is p's, read by Err.

func (p *printer) printf(format string, args ...any) { _, _ = fmt.Fprintf(p, format, args...) }

func (p *printer) println(args ...any) { _, _ = fmt.Fprintln(p, args...) }

// keep keeps err (an encoder's, a flush's) unless an error is kept already.
func (p *printer) keep(err error) {
	if p.err == nil {
		p.err = err
	}
}

// Err is the first error writing the output.
func (p *printer) Err() error {
	if p.err == nil {
		return nil
	}
	return outputError(p.err)
}

// outputError is a failure writing a command's output.
func outputError(err error) error {
	return spec.Wrap(spec.CodeStreamFailure, "cli", err, "writing the output")
}

// printText writes a command's whole output, text, and returns its exit
// code.
func printText(stdout, stderr io.Writer, text string) int {
	if _, err := io.WriteString(stdout, text); err != nil {
		return fail(stderr, outputError(err), 1)
	}
	return 0
}

// closeRuntime closes a command's runtime when it ends (deferred, code its
// named result): an embedded runtime's Close closes its journal, and a
// failing one fails a command that had succeeded, with failCode; after a
// failure it is printed too, the first failure's code kept.
func closeRuntime(rt interface{ Close() error }, stderr io.Writer, code *int, failCode int) {
	if err := rt.Close(); err != nil {
		if c := fail(stderr, err, failCode); *code == 0 {
			*code = c
		}
	}
}
