package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/spec"
)

// grpcCodes maps each stockade code to the gRPC code a client that does not
// read the details sees. The details carry the exact code.
var grpcCodes = map[spec.Code]codes.Code{
	spec.CodeInvalidArgument:   codes.InvalidArgument,
	spec.CodeNotFound:          codes.NotFound,
	spec.CodeConflict:          codes.Aborted,
	spec.CodeCancelled:         codes.Canceled,
	spec.CodeTimeout:           codes.DeadlineExceeded,
	spec.CodeOutputLimit:       codes.ResourceExhausted,
	spec.CodeResourceExhausted: codes.ResourceExhausted,
	spec.CodeUnsupported:       codes.FailedPrecondition,
	spec.CodeAdmissionClosed:   codes.FailedPrecondition,
	spec.CodeUnreconciled:      codes.FailedPrecondition,
	spec.CodeIdentityMismatch:  codes.FailedPrecondition,
	spec.CodeJournalLocked:     codes.FailedPrecondition,
	spec.CodeExecFailed:        codes.FailedPrecondition,
	spec.CodeEngine:            codes.Unavailable,
	spec.CodeStreamFailure:     codes.Internal,
	spec.CodeJournal:           codes.Internal,
	spec.CodeInternal:          codes.Internal,
}

// wireError is the detail for err: its first *spec.Error, or an internal
// (cancelled, for a context's end) error holding its text.
func wireError(err error) *stockadev1.Error {
	var e *spec.Error
	if errors.As(err, &e) {
		w := &stockadev1.Error{Code: string(e.Code), Op: e.Op, Msg: e.Msg}
		if e.Cause != nil {
			w.Cause = e.Cause.Error()
		}
		return w
	}
	code := spec.CodeInternal
	if errors.Is(err, context.Canceled) {
		code = spec.CodeCancelled
	} else if errors.Is(err, context.DeadlineExceeded) {
		code = spec.CodeTimeout
	}
	return &stockadev1.Error{Code: string(code), Op: "server", Msg: err.Error()}
}

// toStatus turns err into the status a call fails with: the mapped gRPC
// code, the whole text, and the stockade error in the details.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (a transport error passed through)
	}
	w := wireError(err)
	c, ok := grpcCodes[spec.Code(w.Code)]
	if !ok {
		c = codes.Unknown
	}
	st, derr := status.New(c, err.Error()).WithDetails(w)
	if derr != nil {
		return status.Error(c, err.Error())
	}
	return st.Err()
}
