// Package wire is the protocol between the runtime and stockade-warden, the
// small program that runs inside each sandbox and spawns its processes. Both
// sides import it; it uses the standard library only.
//
// # Transport
//
// One link is a byte stream in each direction: the warden's stdin and stdout
// under the Docker exec that started it (inside Docker's own multiplex
// framing, which the runtime removes), or, after a reattach, the same over
// the unix socket the warden listens on, bridged by `stockade-warden attach`.
//
// # Frames
//
// Every message is one frame: a 9-byte header and a payload.
//
//	offset  size  field
//	0       1     type (Type)
//	1       4     channel, big-endian uint32: 0 is the control channel,
//	              every other value one process (the runtime picks it)
//	5       4     payload length, big-endian uint32, at most MaxPayload
//	9       n     payload
//
// Control payloads (Init, Challenge, Auth, Hello, Spawn, Started,
// SpawnFailed, Exited, Table, Rekey) are JSON objects; the others are binary and
// described at their Type. A decoder refuses an unknown type, an oversized
// payload, a payload of the wrong size or shape, and a control type on the
// wrong kind of channel: the peer broke the protocol. A violation by the
// warden ends the link (the warden is untrusted: nothing else it says can
// be believed then). The warden ends the link for a violation of the
// framing or on the control channel; a runtime's request about one process
// channel that it cannot apply (a malformed frame read whole, an offset
// out of range, a channel it does not hold) is refused alone, so one
// channel's fault never cuts its neighbours.
//
// Forget asks the warden to drop a process the runtime is done with. The
// runtime sends it once the warden reported the process reaped; a Forget
// before that kills the group and drops the process at its reap.
//
// # Flow
//
// Output (warden → runtime) is counted per channel as one sequence across
// stdout and stderr, from offset 0. The warden may have at most the window
// (Hello.Window) of bytes sent and not acknowledged per channel; the runtime
// acknowledges (Ack) once it has recorded and handed bytes on, so a consumer
// that stops reading one process stops only that process's window, and the
// warden stops reading that child's pipes. Stdin (runtime → warden) is the
// mirror image: at most Hello.StdinWindow bytes beyond the last InAck.
//
// # Secret
//
// Init carries the secret that authenticates every reattach (a MAC of the
// warden's nonce under it, and the warden's proof of it in Hello). Rekey,
// sent on a live link, replaces it: the warden answers Rekeyed once a
// reattach needs the new secret and the old one is refused.
//
// After a reattach the runtime sends Resume with the offset it has recorded;
// the warden sends again from there (it keeps every unacknowledged byte), so
// every byte reaches the recording exactly once, in order.
package wire
