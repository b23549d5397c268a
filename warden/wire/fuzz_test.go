package wire

import (
	"bytes"
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
		frame(TExited, 1, []byte(`{"code":0,"output":0,"usage":{"wall_ns":5,"user_ns":3,"sys_ns":1,"max_rss":4096,"read_bytes":512,"write_bytes":-1}}`)),
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
				if !errors.Is(err, io.EOF) && !IsProtocol(err) {
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
			default:
				// every other type has no field checked here
			}
			if m := newMessage(fr.Type); m != nil {
				if err := Decode(fr, m); err == nil {
					if err := m.Validate(); err != nil {
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
