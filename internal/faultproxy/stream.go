package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// stream is a hijacked exchange being relayed.
type stream struct {
	info  reqInfo
	armed atomic.Pointer[armed]
	off   atomic.Int64 // bytes of the stream read from the daemon so far
}

// streamAction reports whether an action acts on a body or stream (and so
// is armed on a hijacked stream).
func streamAction(a Action) bool {
	switch a {
	case ResetAfter, Truncate, Stall, CorruptStream, CorruptLength:
		return true
	case Pass, Reset, Delay:
		// On the request, or before the response.
	}
	return false
}

type closeWriter interface{ CloseWrite() error }

// hijack relays a hijacked exchange: the response head, then raw bytes
// both ways until the daemon's side ends and the client closes, or a fault
// cuts it. The caller aborts the session when it returns.
func (s *session) hijack(info reqInfo, a armed, resp *http.Response, d net.Conn, dbr *bufio.Reader) {
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/%d.%d %s\r\n", resp.ProtoMajor, resp.ProtoMinor, resp.Status)
	_ = resp.Header.Write(&head) // a bytes.Buffer: writing to it never fails
	head.WriteString("\r\n")
	st := &stream{info: info}
	if streamAction(a.action()) {
		if a.action() == ResetAfter {
			if a.at < int64(head.Len()) {
				_, _ = s.c.Write(head.Bytes()[:a.at]) // then the reset: the client sees it either way
				return
			}
			a.at -= int64(head.Len())
		}
		st.armed.Store(&a)
	}
	if _, err := s.c.Write(head.Bytes()); err != nil {
		return
	}
	s.stream.Store(st) // Open rules see it from now on
	clientDone := make(chan struct{})
	s.p.spawn(func() {
		defer close(clientDone)
		if _, err := io.Copy(d, s.cbr); err != nil {
			s.abort()
			return
		}
		if cw, ok := d.(closeWriter); ok {
			_ = cw.CloseWrite() // a half-close; if the conn is gone, the relay ends anyway
		}
	})
	if err := st.relay(s, dbr, clientDone); err != nil {
		return
	}
	// The daemon's side ended: so does the client's, and the exchange
	// ends when the client closes its side too.
	if cw, ok := s.c.(closeWriter); ok {
		_ = cw.CloseWrite() // a half-close; if the conn is gone, the relay ends anyway
	}
	select {
	case <-clientDone:
	case <-s.done:
	}
}

// relay copies the daemon's side of a hijacked stream to the client,
// applying the armed fault. nil: the daemon's side ended.
func (st *stream) relay(s *session, dbr *bufio.Reader, clientDone <-chan struct{}) error {
	emit := func(b []byte) error {
		_, err := s.c.Write(b)
		return err
	}
	var fp framer
	buf := make([]byte, 32<<10)
	var p []byte
	var rerr error
	for {
		if err := st.gate(s, &fp, emit, clientDone); err != nil {
			return err
		}
		if len(p) == 0 {
			if rerr != nil {
				if err := fp.flush(emit); err != nil {
					return err
				}
				if rerr == io.EOF {
					return nil
				}
				return rerr
			}
			var n int
			n, rerr = dbr.Read(buf)
			p = buf[:n]
			continue
		}
		a := st.armed.Load()
		k := len(p)
		if a != nil {
			switch a.f.rule.Action {
			case ResetAfter, Truncate, Stall:
				if room := a.at - st.off.Load(); room > 0 && room < int64(k) {
					k = int(room)
				}
			case Pass, Reset, Delay, CorruptStream, CorruptLength:
				// No byte count to stop at: the corruptions act on a
				// frame header (feed).
			}
		}
		cut, err := fp.feed(p[:k], st.off.Load(), a, emit)
		st.off.Add(int64(k))
		p = p[k:]
		if err != nil {
			return err
		}
		if cut {
			return errCut
		}
	}
}

// gate applies a cut or a stall due at the stream's current offset.
func (st *stream) gate(s *session, fp *framer, emit func([]byte) error, clientDone <-chan struct{}) error {
	for {
		a := st.armed.Load()
		if a == nil || st.off.Load() < a.at {
			return nil
		}
		switch a.f.rule.Action {
		case ResetAfter, Truncate:
			_ = fp.flush(emit) // the cut is what is returned either way
			return errCut
		case Stall:
			if err := fp.flush(emit); err != nil {
				return err
			}
			select {
			case <-s.done:
				return errCut
			case <-clientDone:
				// The client closed (or half-closed) its side while
				// stalled: the exchange ends.
				return errCut
			case <-a.f.removed:
				st.armed.CompareAndSwap(a, nil)
			}
		default:
			return nil
		}
	}
}

// framer follows Docker's multiplex framing through a stream, holding a
// frame header until it is whole so a corrupt action can rewrite it.
type framer struct {
	hdr     [8]byte
	hn      int   // header bytes collected
	emitted int   // header bytes already relayed (a flush before it was whole)
	hdrOff  int64 // stream offset of the header being collected
	left    int64 // payload bytes of the current frame still to come
	cutEnd  bool  // cut the stream when the current frame's payload ends
}

// feed relays p, which starts at stream offset off, applying a corrupt
// action a calls for. cut: the stream must end here.
func (fp *framer) feed(p []byte, off int64, a *armed, emit func([]byte) error) (cut bool, err error) {
	for len(p) > 0 {
		if fp.left > 0 {
			k := int(min(int64(len(p)), fp.left))
			if err := emit(p[:k]); err != nil {
				return false, err
			}
			fp.left -= int64(k)
			p, off = p[k:], off+int64(k)
			if fp.left == 0 && fp.cutEnd {
				return true, nil
			}
			continue
		}
		if fp.hn == 0 {
			fp.hdrOff = off
		}
		k := copy(fp.hdr[fp.hn:], p)
		fp.hn += k
		p, off = p[k:], off+int64(k)
		if fp.hn < len(fp.hdr) {
			continue
		}
		size := binary.BigEndian.Uint32(fp.hdr[4:])
		if a != nil && !a.used && fp.hdrOff >= a.at && fp.emitted == 0 {
			switch a.f.rule.Action {
			case CorruptStream:
				fp.hdr[0] ^= 0x80
				a.used = true
			case CorruptLength:
				binary.BigEndian.PutUint32(fp.hdr[4:], size+a.f.rule.Extra)
				fp.cutEnd = true
				a.used = true
			case Pass, Reset, ResetAfter, Delay, Truncate, Stall:
				// Not a header's fault.
			}
		}
		err := emit(fp.hdr[fp.emitted:])
		fp.hn, fp.emitted = 0, 0
		if err != nil {
			return false, err
		}
		fp.left = int64(size)
		if size == 0 && fp.cutEnd {
			return true, nil
		}
	}
	return false, nil
}

// flush relays a partly collected header as it is.
func (fp *framer) flush(emit func([]byte) error) error {
	if fp.hn > fp.emitted {
		if err := emit(fp.hdr[fp.emitted:fp.hn]); err != nil {
			return err
		}
		fp.emitted = fp.hn
	}
	return nil
}
