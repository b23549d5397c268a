// Package framing decodes and encodes Docker's stdout/stderr multiplex
// format: the byte stream an exec attach (or a container attach or logs
// call) returns when the exec has no TTY. It is pure: no I/O beyond the
// io.Reader and io.Writer it is given, no goroutines.
//
// # Wire format
//
// The stream is a sequence of frames. Each frame is an 8-byte header and a
// payload:
//
//	offset  size  field
//	0       1     stream id: 1 stdout, 2 stderr, 3 the daemon's error
//	              (0 stdin never appears on output and is rejected)
//	1       3     zero padding
//	4       4     payload length, big-endian uint32
//	8       n     payload: n bytes of the stream's output
//
// Frame boundaries mean nothing: the daemon cuts output wherever its reads of
// the process's pipes end (at most 32 KiB per frame), and the payload of one
// frame may be split across any number of reads of the connection, as may
// the header. A frame on stream 3 carries an error message from the daemon
// instead of output; stdcopy returns it as an error, and so do we.
//
// # Use
//
// Decoder is pull-style, for backpressure: the caller asks Next for the next
// piece of payload only when it has room for it, and the Decoder reads from
// the source only then, at most one buffer (Options.ChunkSize, 64 KiB by
// default) at a time. A consumer that stops calling Next stops the socket
// reads. The pieces are slices of the Decoder's one buffer: no copy, no
// allocation per frame.
//
//	dec := framing.NewDecoder(hijacked.Reader, framing.Options{})
//	for {
//		id, p, err := dec.Next()
//		if err == io.EOF {
//			break // clean end between frames
//		}
//		if err != nil {
//			return err // *spec.Error: stream_failure or output_limit
//		}
//		deliver(id, p) // p is valid until the next call to Next
//	}
//
// Copy is the push-style convenience with the signature of moby's
// stdcopy.StdCopy, stricter than it (see Copy). Encoder writes the format,
// for tests and fake engines.
//
// # Contract
//
//   - Next returns only Stdout and Stderr pieces, never empty, at most
//     ChunkSize bytes each, each from one frame; it never returns more bytes
//     for a frame than its header declares. Zero-length frames are skipped.
//   - io.EOF (bare) means the source ended exactly between frames. A source
//     that ends inside a header or a payload gives a stream_failure wrapping
//     io.ErrUnexpectedEOF, naming the offset and how much of the part arrived
//     (the clean end told from the torn tail, as etcd's WAL decoder does).
//   - A header with stream id 0 or above 3, or nonzero padding, is a
//     stream_failure naming the header's bytes and offset. A declared length
//     over Options.FrameLimit (1 MiB by default) is an output_limit, checked
//     before any of the payload is read. A stream-3 frame is read whole (it
//     is bounded by the frame limit) and returned as a stream_failure
//     wrapping *DaemonError.
//   - Errors about the input are sticky. Errors from the source are wrapped
//     (stream_failure, errors.Is reaches the cause), reported once, and a
//     later call reads again, as bufio.Reader does; bytes a Read returned
//     with its error are decoded first, as the io.Reader contract asks.
//   - Who owns what: the caller owns the source and closes it; the Decoder
//     never closes anything. The Encoder and Copy never close their writers.
//
// # Caveats
//
//   - A TTY exec is not multiplexed: its raw output read by a Decoder fails
//     with a stream_failure (usually an invalid header) at the first byte
//     that does not look like a header, possibly after delivering garbage
//     that happened to. Decide from the exec's config, not from the bytes.
//   - The Decoder cannot tell where the daemon meant a line to end: frames
//     are not lines, and a multi-byte UTF-8 character may be split across
//     frames, so across pieces.
//   - Stdout and stderr share one connection and one Decoder: a consumer
//     that does not drain one of them blocks the other.
//   - Neither Decoder nor Encoder is safe for concurrent use.
package framing
