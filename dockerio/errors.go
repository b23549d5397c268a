package dockerio

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/stockade/stockade/spec"
)

// ErrPaused is the cause (code conflict) when Docker refuses an exec into a
// paused workload (a consistent copy is being taken): the same call can be
// made again once it thaws.
var ErrPaused = errors.New("dockerio: the workload is paused")

// translate turns an error from the Docker client into a *spec.Error at the
// edge: not found → not_found, conflict or already-exists → conflict, a
// cancelled or expired context → cancelled/timeout, anything else → engine.
// The message names the operation and the ids involved; the cause is kept for
// errors.Is. A *spec.Error passes through unchanged.
func translate(err error, op, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var se *spec.Error
	if errors.As(err, &se) {
		return err
	}
	msg := fmt.Sprintf(format, args...)
	switch {
	case errdefs.IsNotFound(err):
		return spec.Wrap(spec.CodeNotFound, op, err, "%s", msg)
	case errdefs.IsConflict(err) && strings.Contains(err.Error(), "is paused"):
		return spec.Wrap(spec.CodeConflict, op, errors.Join(ErrPaused, err), "%s", msg)
	case errdefs.IsConflict(err), errdefs.IsAlreadyExists(err):
		return spec.Wrap(spec.CodeConflict, op, err, "%s", msg)
	case errors.Is(err, context.Canceled):
		return spec.Wrap(spec.CodeCancelled, op, err, "%s", msg)
	case errors.Is(err, context.DeadlineExceeded):
		return spec.Wrap(spec.CodeTimeout, op, err, "%s", msg)
	}
	return spec.Wrap(spec.CodeEngine, op, err, "%s", msg)
}

// unsupported builds the unsupported error readback and admission return.
func unsupported(op, format string, args ...any) *spec.Error {
	return spec.Errorf(spec.CodeUnsupported, op, format, args...)
}

// execFailureText matches the text Docker (runc) or stockade's exec wrapper
// writes when a command could not be started at all.
var execFailureText = regexp.MustCompile(`(?i)OCI runtime exec failed|exec failed|executable file not found|no such file or directory|not found|permission denied|cannot execute|chdir to cwd`)

// ExecFailure tells an exec start failure from an ordinary exit. Docker
// reports a command it could not start as exit 126 (not executable) or 127
// (not found) with the reason as text on the output (Docker's own failures
// arrive on stdout; the wrapper's shell reports on stderr). Given the exit
// code and the first bytes of output, ExecFailure returns an exec_failed
// *spec.Error quoting the text, or nil when the exit is an ordinary one.
// A program that itself exits 126/127 and prints such text is
// indistinguishable; callers that need certainty check Attachment.Group (a
// process that never reached the wrapper has none).
func ExecFailure(exitCode int, output []byte) error {
	if exitCode != 126 && exitCode != 127 {
		return nil
	}
	text := strings.TrimSpace(string(output))
	if len(text) > 512 {
		text = text[:512]
	}
	if !execFailureText.MatchString(text) {
		return nil
	}
	return spec.Errorf(spec.CodeExecFailed, "dockerio.exec", "exit %d: %s", exitCode, text)
}
