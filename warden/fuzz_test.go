package warden

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// seedFrames returns valid encodings of every frame type, one per seed,
// and a few streams of several.
func seedFrames() [][]byte {
	var seeds [][]byte
	enc := func(fn func(w *Writer)) []byte {
		var buf bytes.Buffer
		fn(NewWriter(&buf)) // a bytes.Buffer: the writes in fn never fail
		return buf.Bytes()
	}
	for typ, msg := range validMessages() {
		seeds = append(seeds, enc(func(w *Writer) { _ = w.WriteJSON(typ, channelFor(typ), msg) }))
	}
	seeds = append(seeds,
		enc(func(w *Writer) { _ = w.WriteOut(1, 1, []byte("out")); _ = w.WriteOut(1, 2, []byte("err")) }),
		enc(func(w *Writer) { _ = w.WriteOffset(TAck, 1, 5) }),
		enc(func(w *Writer) { _ = w.Write(TIn, 1, []byte("in")) }),
		enc(func(w *Writer) { _ = w.WriteOffset(TInAck, 1, 2) }),
		enc(func(w *Writer) { _ = w.Write(TCloseIn, 1); _ = w.Write(TForget, 1); _ = w.Write(TList, 0) }),
		enc(func(w *Writer) { _ = w.WriteSignal(1, 9); _ = w.WriteResize(1, 24, 80) }),
		enc(func(w *Writer) { _ = w.WriteOffset(TResume, 1, 0) }),
		enc(func(w *Writer) { _ = w.Write(TRekeyed, 0) }),
		frame(TRekey, 0, []byte(`{"secret":"ab"}`)),
		frame(TOut, 0, []byte{1, 'x'}),
		header(TOut, 1, MaxPayload+1),
		frame(TExited, 1, []byte(`{"code":0,"signal":9}`)),
		[]byte{byte(TOut), 0, 0},
	)
	return seeds
}

// FuzzReader: no input makes the reader or a decoder panic, and every
// frame the reader returns passes CheckShape.
func FuzzReader(f *testing.F) {
	for _, s := range seedFrames() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for {
			fr, err := r.Read()
			if err != nil {
				if err != io.EOF && !IsProtocol(err) {
					t.Fatalf("error %v is neither io.EOF nor a violation", err)
				}
				return
			}
			if err := CheckShape(fr); err != nil {
				t.Fatalf("Read returned a frame that fails CheckShape: %v", err)
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			switch fr.Type {
			case TAck, TInAck, TResume:
				Offset(fr)
			case TSignal:
				SignalNumber(fr)
			case TResize:
				Size(fr)
			}
			if m := newMessage(fr.Type); m != nil {
				if err := Decode(fr, m); err == nil {
					if err := m.validate(); err != nil {
						t.Fatalf("decoded %v fails validation: %v", fr.Type, err)
					}
					// What decodes re-encodes to something that decodes.
					b, err := json.Marshal(m)
					if err != nil {
						t.Fatal(err)
					}
					if err := Decode(Frame{Type: fr.Type, Channel: fr.Channel, Payload: b}, newMessage(fr.Type)); err != nil {
						t.Fatalf("re-encoded %v: %v", fr.Type, err)
					}
				} else if !IsProtocol(err) {
					t.Fatalf("decode error %v is not a violation", err)
				}
			}
		}
	})
}

// FuzzLink: arbitrary bytes as the warden's output after a valid Hello,
// against a link with a started process on channel 1 (its consumer
// reading, its stdin writing), a pending spawn on channel 2, a pending
// List and a pending Rekey. The link ends with a violation or the stream's end, never a panic
// or a hang.
func FuzzLink(f *testing.F) {
	out := func(ch uint32, stream byte, d string) []byte { return frame(TOut, ch, append([]byte{stream}, d...)) }
	js := func(t Type, ch uint32, v any) []byte {
		b, _ := json.Marshal(v)
		return frame(t, ch, b)
	}
	off := func(t Type, ch uint32, o uint64) []byte {
		return frame(t, ch, binary.BigEndian.AppendUint64(nil, o))
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, s := range [][]byte{
		nil,
		out(1, 1, "hello"),
		cat(out(1, 1, "hello"), out(1, 2, "err"), js(TExited, 1, Exited{Code: 0, Output: 8, Stdout: 8})),
		cat(out(1, 1, "hello"), js(TChanges, 1, Changes{Created: 1, Entries: []Change{{Op: OpCreated, Path: "/workspace/work/x", Kind: KindFile, SHA256: "ab"}}}), js(TExited, 1, Exited{Code: 0, Output: 5, Stdout: 5})),
		cat(js(TChanges, 1, Changes{Modified: 1, Entries: []Change{{Op: OpModified, Path: "/workspace/work/x", Kind: KindFile, Before: new(string), After: new(string)}}}), js(TExited, 1, Exited{Code: 0})),
		cat(js(TExited, 1, Exited{Code: 0, Output: 3, Stdout: 3}), out(1, 1, "abc")),
		cat(js(TExited, 1, Exited{Code: 0, Output: 3, Stdout: 3}), out(1, 1, "abcd")),
		off(TInAck, 1, 100),
		cat(js(TReaped, 1, Reaped{Code: -1, Signal: 9}), out(1, 1, "late"), js(TReaped, 1, Reaped{Code: 2})),
		cat(off(TInAck, 1, 100), off(TInAck, 1, 50)),
		js(TStarted, 2, Started{PID: 3, PGID: 3}),
		cat(js(TStarted, 2, Started{PID: 3, PGID: 3}), out(2, 1, "x"), js(TExited, 2, Exited{Code: -1, Signal: 9, Output: 1, Stdout: 1})),
		js(TSpawnFailed, 2, SpawnFailed{Code: 127, Error: "nope"}),
		js(TStarted, 1, Started{PID: 3, PGID: 3}),
		js(TTable, 0, Table{Processes: []Entry{{Channel: 1, ID: "p", PID: 1, PGID: 1, Running: true}}}),
		cat(js(TTable, 0, Table{}), js(TTable, 0, Table{})),
		frame(TRekeyed, 0, nil),
		cat(frame(TRekeyed, 0, nil), frame(TRekeyed, 0, nil)),
		js(TRekey, 0, Rekey{Secret: hex.EncodeToString(testSecret)}),
		out(1, 1, string(make([]byte, 5000))),
		out(9, 1, "x"),
		frame(TAck, 1, make([]byte, 8)),
		header(TOut, 1, 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, fk := openLink(t, 4096, 1024)
		p := startProc(t, l, fk, Spawn{ID: "p", Argv: []string{"x"}, Stdin: true})
		spawned := make(chan struct{})
		go func() {
			defer close(spawned)
			if q, err := l.Spawn(context.Background(), Spawn{ID: "q", Argv: []string{"x"}}); err == nil {
				_, _, _ = readAll(q)
			}
		}()
		fk.expect(TSpawn, 2)
		listed := make(chan struct{})
		go func() { defer close(listed); _, _ = l.List(context.Background()) }()
		fk.expect(TList, 0)
		rekeyed := make(chan struct{})
		go func() { defer close(rekeyed); _ = l.Rekey(context.Background(), bytes.Repeat([]byte{7}, SecretSize)) }()
		fk.expect(TRekey, 0)
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
		if err := l.Err(); !IsProtocol(err) && !errors.Is(err, io.EOF) {
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
