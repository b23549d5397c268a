// Package server serves the embedded runtime (the root package) over gRPC
// (api/stockade/v1) on a unix socket beside its journal. It is a thin
// translation layer: every call maps to one call of the embedded API, and
// the server keeps no state of its own beyond its open streams and the
// handles of the processes it started (so Signal, Stop and Wait can name
// them by id).
//
// Use:
//
//	rt, err := stockade.Open(ctx, opts)      // the journal lock first
//	lis, err := server.Listen(server.SocketPath(journalPath))
//	srv := server.New(rt.Host(), server.Options{})
//	go srv.Serve(lis)
//	...
//	srv.Stop()                               // then rt.Close()
//
// Security: the socket is 0600 in a 0700 directory the server's effective
// uid owns (Listen refuses another's: its owner could move the socket
// aside and listen in its place), bound through the directory it opened
// and checked; every accepted connection's peer uid (SO_PEERCRED) must be
// the server's own or root; others are closed before a byte is read. A
// client dials only a socket whose directory is its own user's or root's.
//
// Flow control: the HTTP/2 windows are pinned (InitialWindowSize,
// InitialConnWindowSize): left to gRPC's BDP estimation they grow to 16 MiB
// per stream, an unread client's worth of buffering we do not want. An
// attached process's output is read only as Send returns, and Send blocks
// while the client's window is full, so a client that does not read stops
// the process (through the runtime's own backpressure), with at most the
// window, gRPC's write quota and one chunk per stream held in between.
//
// Who goes away decides: a client whose attached Exec ends without reading
// the result detaches its process, which runs on recorded (one started
// with StopWithCaller is stopped, cancelled); a server that stops leaves
// processes running, for the next runtime to re-adopt.
package server
