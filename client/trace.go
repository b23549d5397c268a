package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stockade/stockade/tracing"
)

// The caller's span travels to the server as W3C traceparent metadata,
// where it parents the runtime's spans of the call.

func toServer(ctx context.Context) context.Context {
	var kv []string
	tracing.Inject(ctx, func(k, v string) { kv = append(kv, k, v) })
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func traceUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(toServer(ctx), method, req, reply, cc, opts...)
}

func traceStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(toServer(ctx), desc, cc, method, opts...)
}
