package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stockade/stockade/tracing"
)

// The caller's span, sent as W3C traceparent metadata, parents the
// runtime's spans of the call.

func fromCaller(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return tracing.Extract(ctx, func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	})
}

func traceUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	return next(fromCaller(ctx), req)
}

func traceStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	return next(srv, tracedStream{ServerStream: ss, ctx: fromCaller(ss.Context())})
}

// tracedStream is a stream whose context carries the caller's span.
type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s tracedStream) Context() context.Context { return s.ctx }
