// Package client is the Go client of `stockade serve`: the same calls as
// the embedded API (host.Runtime, host.Sandbox, host.Process) over the
// server's unix socket, so a Go host switches between embedded and served
// with one line: client.Dial("") (the default journal's server, or
// $STOCKADE_SOCKET) in place of Runtime.Host of stockade.Open (see the
// examples, and host's).
//
// It links neither protoactor nor the Docker client: it imports only the
// generated API, host/, spec/ and lifecycle/.
//
// Errors come back as *spec.Error with the server's code, op and message
// (errors.As and spec.IsCode work as they do embedded). A server that
// cannot be reached or goes away mid-call gives a cancelled error.
//
// Streams behave as embedded: every piped output stream must be read
// (stdout and stderr arrive on one gRPC stream, so an unread one blocks the
// other and, through flow control, the process); closing an output stream
// before its end, or the client going away, detaches the process, which
// runs on recorded (one started with StopWithCaller is stopped,
// cancelled); Process.Attach reads its recording from any offset. Each
// attached process has its own gRPC stream; the connection's receive
// windows are pinned, so a process's unread output waits in the server's
// pipe, not here.
//
// The calls by process id (Wait, Signal, StopProcess, Attach) and
// Sandbox.StartDetached predate host.Runtime.Process and stay for the CLI:
// a Go host uses Runtime.Process(ctx, id) and the Process's methods, the
// same embedded and served, and Start with Stdout and Stderr spec.Discard
// for what StartDetached does.
package client
