package client

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/spec"
)

// fromWire rebuilds the server's *spec.Error from its wire form.
func fromWire(w *stockadev1.Error) *spec.Error {
	e := &spec.Error{Code: spec.Code(w.Code), Op: w.Op, Msg: w.Msg}
	if w.Cause != "" {
		e.Cause = errors.New(w.Cause)
	}
	return e
}

// fromStatus turns a call's error into a *spec.Error: the one in the
// status details, or one made from the gRPC code for a status without them
// (the transport's own: a server gone or unreachable is cancelled).
func fromStatus(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return spec.Wrap(spec.CodeInternal, "client", err, "calling the server")
	}
	for _, d := range st.Details() {
		if w, ok := d.(*stockadev1.Error); ok {
			return fromWire(w)
		}
	}
	switch st.Code() {
	case codes.Canceled:
		// The caller's context (a server gone is Unavailable): cancelled,
		// as the embedded runtime says it, with the context's error.
		return spec.Wrap(spec.CodeCancelled, "client", context.Canceled, "the call's context was cancelled")
	case codes.DeadlineExceeded:
		// The caller's deadline, never a process's timeout (that one
		// comes as the server's *spec.Error, code timeout).
		return spec.Wrap(spec.CodeCancelled, "client", context.DeadlineExceeded, "the call's context reached its deadline")
	case codes.Unavailable:
		return spec.Errorf(spec.CodeCancelled, "client", "the server went away or cannot be reached: %s", st.Message())
	case codes.InvalidArgument:
		return spec.Errorf(spec.CodeInvalidArgument, "client", "%s", st.Message())
	case codes.NotFound:
		return spec.Errorf(spec.CodeNotFound, "client", "%s", st.Message())
	default:
		// Any other code (the server's own errors carry their code in a
		// *stockadev1.Error detail, above): internal, naming it.
		return spec.Errorf(spec.CodeInternal, "client", "%s: %s", st.Code(), st.Message())
	}
}
