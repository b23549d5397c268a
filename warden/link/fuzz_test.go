package link

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/stockade/stockade/warden/wire"
)

// FuzzLink: arbitrary bytes as the warden's output after a valid Hello,
// against a link with a started process on channel 1 (its consumer
// reading, its stdin writing), a pending spawn on channel 2, a pending
// List and a pending Rekey. The link ends with a violation or the stream's end, never a panic
// or a hang.
func FuzzLink(f *testing.F) {
	out := func(ch uint32, stream byte, d string) []byte {
		return frame(wire.TOut, ch, append([]byte{stream}, d...))
	}
	js := func(t wire.Type, ch uint32, v any) []byte {
		b, _ := json.Marshal(v)
		return frame(t, ch, b)
	}
	off := func(t wire.Type, ch uint32, o uint64) []byte {
		return frame(t, ch, binary.BigEndian.AppendUint64(nil, o))
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, s := range [][]byte{
		nil,
		out(1, 1, "hello"),
		cat(out(1, 1, "hello"), out(1, 2, "err"), js(wire.TExited, 1, wire.Exited{Code: 0, Output: 8, Stdout: 8})),
		cat(out(1, 1, "hello"), js(wire.TChanges, 1, wire.Changes{Created: 1, Entries: []wire.Change{{Op: wire.OpCreated, Path: "/workspace/work/x", Kind: wire.KindFile, SHA256: "ab"}}}), js(wire.TExited, 1, wire.Exited{Code: 0, Output: 5, Stdout: 5})),
		cat(js(wire.TChanges, 1, wire.Changes{Modified: 1, Entries: []wire.Change{{Op: wire.OpModified, Path: "/workspace/work/x", Kind: wire.KindFile, Before: new(string), After: new(string)}}}), js(wire.TExited, 1, wire.Exited{Code: 0})),
		cat(js(wire.TExited, 1, wire.Exited{Code: 0, Output: 3, Stdout: 3}), out(1, 1, "abc")),
		cat(js(wire.TExited, 1, wire.Exited{Code: 0, Output: 3, Stdout: 3}), out(1, 1, "abcd")),
		off(wire.TInAck, 1, 100),
		cat(js(wire.TReaped, 1, wire.Reaped{Code: -1, Signal: 9}), out(1, 1, "late"), js(wire.TReaped, 1, wire.Reaped{Code: 2})),
		cat(off(wire.TInAck, 1, 100), off(wire.TInAck, 1, 50)),
		js(wire.TStarted, 2, wire.Started{PID: 3, PGID: 3}),
		cat(js(wire.TStarted, 2, wire.Started{PID: 3, PGID: 3}), out(2, 1, "x"), js(wire.TExited, 2, wire.Exited{Code: -1, Signal: 9, Output: 1, Stdout: 1})),
		js(wire.TSpawnFailed, 2, wire.SpawnFailed{Code: 127, Error: "nope"}),
		js(wire.TStarted, 1, wire.Started{PID: 3, PGID: 3}),
		js(wire.TTable, 0, wire.Table{Processes: []wire.Entry{{Channel: 1, ID: "p", PID: 1, PGID: 1, Running: true}}}),
		cat(js(wire.TTable, 0, wire.Table{}), js(wire.TTable, 0, wire.Table{})),
		frame(wire.TRekeyed, 0, nil),
		cat(frame(wire.TRekeyed, 0, nil), frame(wire.TRekeyed, 0, nil)),
		js(wire.TRekey, 0, wire.Rekey{Secret: hex.EncodeToString(testSecret)}),
		out(1, 1, string(make([]byte, 5000))),
		out(9, 1, "x"),
		frame(wire.TAck, 1, make([]byte, 8)),
		header(wire.TOut, 1, 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, fk := openLink(t, 4096, 1024)
		p := startProc(t, l, fk, wire.Spawn{ID: "p", Argv: []string{"x"}, Stdin: true})
		spawned := make(chan struct{})
		go func() {
			defer close(spawned)
			if q, err := l.Spawn(context.Background(), wire.Spawn{ID: "q", Argv: []string{"x"}}); err == nil {
				_, _, _ = readAll(q)
			}
		}()
		fk.expect(wire.TSpawn, 2)
		listed := make(chan struct{})
		go func() { defer close(listed); _, _ = l.List(context.Background()) }()
		fk.expect(wire.TList, 0)
		rekeyed := make(chan struct{})
		go func() {
			defer close(rekeyed)
			_ = l.Rekey(context.Background(), bytes.Repeat([]byte{7}, wire.SecretSize))
		}()
		fk.expect(wire.TRekey, 0)
		read := make(chan struct{})
		go func() { defer close(read); _, _, _ = readAll(p) }()
		wrote := make(chan struct{})
		go func() { defer close(wrote); _, _ = p.Write(make([]byte, 3000)) }()

		go func() {
			_, _ = fk.raw.Write(data)
			_ = fk.raw.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatal("the link did not end")
		}
		if err := l.Err(); !wire.IsProtocol(err) && !errors.Is(err, io.EOF) {
			t.Fatalf("the link ended with %v", err)
		}
		for _, c := range []chan struct{}{spawned, listed, rekeyed, read, wrote} {
			select {
			case <-c:
			case <-ctx.Done():
				t.Fatal("a caller is still blocked")
			}
		}
		// Memory stays within the window.
		p.mu.Lock()
		n := len(p.q.buf)
		p.mu.Unlock()
		if n > 4096 {
			t.Fatalf("queue buffer of %d bytes, window 4096", n)
		}
	})
}

// header is a frame header as the wire format lays it out (no check: a
// seed may be one the link must refuse).
func header(t wire.Type, ch, n uint32) []byte {
	b := []byte{byte(t), 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:5], ch)
	binary.BigEndian.PutUint32(b[5:9], n)
	return b
}

// frame is one whole frame (see header).
func frame(t wire.Type, ch uint32, payload []byte) []byte {
	return append(header(t, ch, uint32(len(payload))), payload...)
}
