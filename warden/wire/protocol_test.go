package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

var (
	hex32 = strings.Repeat("ab", SecretSize)
	hexMA = strings.Repeat("cd", 32)
)

// validMessages holds a valid message of every JSON type.
func validMessages() map[Type]any {
	return map[Type]any{
		TInit:        &Init{Secret: hex32, Window: 1 << 20, StdinWindow: 4096},
		TChallenge:   &Challenge{Nonce: hex32},
		TRekey:       &Rekey{Secret: hex32},
		TAuth:        &Auth{MAC: hexMA, Nonce: hex32},
		THello:       &Hello{Version: Version, PID: 1, Window: 1 << 20, StdinWindow: 1 << 16, Socket: "/tmp/w.sock", Proof: hexMA},
		TSpawn:       &Spawn{ID: "p1", Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"A=1", "B="}, Dir: "/workspace", Stdin: true, TTY: true, Rows: 24, Cols: 80},
		TStarted:     &Started{PID: 12, PGID: 12, OOMKills: -1},
		TSpawnFailed: &SpawnFailed{Code: 127, Error: "exec: not found"},
		TExited:      &Exited{Code: -1, Signal: 9, Output: 1234, Stdout: 1234, OOMKills: 2, Usage: Usage{WallNanos: 9, UserNanos: 3, SystemNanos: 2, MaxRSS: 4096, ReadBytes: 512, WriteBytes: 1024}},
		TChanges:     &Changes{Created: 2, Omitted: 1, Entries: []Change{{Op: OpCreated, Path: "/workspace/work/a", Kind: KindFile, Size: 3, Mode: 0o644, SHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", After: ptr("abc")}}},
		TTable: &Table{Processes: []Entry{
			{Channel: 1, ID: "p1", PID: 12, PGID: 12, Running: true, Acked: 10, Output: 20},
			{Channel: 2, ID: "p2", PID: 13, PGID: 13, Exit: &Exited{Code: 3, Output: 5, Stdout: 5}, Acked: 5, Output: 5},
		}},
	}
}

// newMessage returns a pointer to a zero message of t's JSON type.
func newMessage(t Type) interface{ Validate() error } {
	switch t {
	case TInit:
		return &Init{}
	case TChallenge:
		return &Challenge{}
	case TRekey:
		return &Rekey{}
	case TAuth:
		return &Auth{}
	case THello:
		return &Hello{}
	case TSpawn:
		return &Spawn{}
	case TStarted:
		return &Started{}
	case TSpawnFailed:
		return &SpawnFailed{}
	case TExited:
		return &Exited{}
	case TChanges:
		return &Changes{}
	case TTable:
		return &Table{}
	default:
		// every other type is binary: tested elsewhere
	}
	return nil
}

func channelFor(t Type) uint32 {
	if t.control() {
		return 0
	}
	return 7
}

func TestRoundTripJSON(t *testing.T) {
	for typ, msg := range validMessages() {
		t.Run(typ.String(), func(t *testing.T) {
			var buf bytes.Buffer
			if err := NewWriter(&buf).WriteJSON(typ, channelFor(typ), msg); err != nil {
				t.Fatal(err)
			}
			f, err := NewReader(&buf).Read()
			if err != nil {
				t.Fatal(err)
			}
			if f.Type != typ || f.Channel != channelFor(typ) {
				t.Fatalf("frame %v on %d", f.Type, f.Channel)
			}
			got := newMessage(typ)
			if err := Decode(f, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, msg) {
				t.Fatalf("got %+v, want %+v", got, msg)
			}
		})
	}
}

func TestRoundTripBinary(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	data := bytes.Repeat([]byte("x"), MaxData)
	steps := []func() error{
		func() error { return w.WriteOut(3, 1, []byte("hello")) },
		func() error { return w.WriteOut(3, 2, data) },
		func() error { return w.WriteOffset(TAck, 3, 1<<40+5) },
		func() error { return w.Write(TIn, 3, []byte("stdin")) },
		func() error { return w.WriteOffset(TInAck, 3, 5) },
		func() error { return w.Write(TCloseIn, 3) },
		func() error { return w.WriteSignal(3, 15) },
		func() error { return w.WriteResize(3, 24, 80) },
		func() error { return w.Write(TForget, 3) },
		func() error { return w.Write(TList, 0) },
		func() error { return w.WriteOffset(TResume, 3, 77) },
		func() error { return w.Write(TRekeyed, 0) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	// One byte at a time: frames must not depend on read sizes.
	r := NewReader(iotest.OneByteReader(&buf))
	check := func(typ Type, ch uint32, fn func(Frame)) {
		t.Helper()
		f, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != typ || f.Channel != ch {
			t.Fatalf("got %v on %d, want %v on %d", f.Type, f.Channel, typ, ch)
		}
		if fn != nil {
			fn(f)
		}
	}
	check(TOut, 3, func(f Frame) {
		if f.Payload[0] != 1 || string(f.Payload[1:]) != "hello" {
			t.Fatalf("out %q", f.Payload)
		}
	})
	check(TOut, 3, func(f Frame) {
		if f.Payload[0] != 2 || !bytes.Equal(f.Payload[1:], data) {
			t.Fatal("long out")
		}
	})
	check(TAck, 3, func(f Frame) {
		if Offset(f) != 1<<40+5 {
			t.Fatal(Offset(f))
		}
	})
	check(TIn, 3, func(f Frame) {
		if string(f.Payload) != "stdin" {
			t.Fatal(f.Payload)
		}
	})
	check(TInAck, 3, func(f Frame) {
		if Offset(f) != 5 {
			t.Fatal(Offset(f))
		}
	})
	check(TCloseIn, 3, nil)
	check(TSignal, 3, func(f Frame) {
		if SignalNumber(f) != 15 {
			t.Fatal(SignalNumber(f))
		}
	})
	check(TResize, 3, func(f Frame) {
		if r, c := Size(f); r != 24 || c != 80 {
			t.Fatal(r, c)
		}
	})
	check(TForget, 3, nil)
	check(TList, 0, nil)
	check(TResume, 3, func(f Frame) {
		if Offset(f) != 77 {
			t.Fatal(Offset(f))
		}
	})
	check(TRekeyed, 0, nil)
	if _, err := r.Read(); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

func TestWriterRefusesOversized(t *testing.T) {
	w := NewWriter(io.Discard)
	if err := w.Write(TIn, 1, make([]byte, MaxPayload+1)); err == nil {
		t.Fatal("oversized frame written")
	}
}

func header(t Type, ch, n uint32) []byte {
	b := []byte{byte(t), 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:5], ch)
	binary.BigEndian.PutUint32(b[5:9], n)
	return b
}

func frame(t Type, ch uint32, payload []byte) []byte {
	return append(header(t, ch, uint32(len(payload))), payload...)
}

func TestReaderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input []byte
		want  string // in the ProtocolError
	}{
		{"unknown type 0", frame(0, 0, nil), "unknown frame type 0"},
		{"unknown type past the end", frame(typeEnd, 1, nil), "unknown frame type"},
		{"unknown type 255", frame(255, 1, []byte("x")), "unknown frame type 255"},
		{"control type on a process channel", frame(THello, 3, []byte("{}")), "hello frame on process channel 3"},
		{"list on a process channel", frame(TList, 3, nil), "list frame on process channel 3"},
		{"process type on the control channel", frame(TOut, 0, []byte{1, 'x'}), "out frame on the control channel"},
		{"ack on the control channel", frame(TAck, 0, make([]byte, 8)), "ack frame on the control channel"},
		{"out without data", frame(TOut, 1, []byte{1}), "out frame of 1 bytes"},
		{"out of stream 0", frame(TOut, 1, []byte{0, 'x'}), "for stream 0"},
		{"out of stream 3", frame(TOut, 1, []byte{3, 'x'}), "for stream 3"},
		{"empty out", frame(TOut, 1, nil), "for stream -1"},
		{"empty in", frame(TIn, 1, nil), "in frame"},
		{"short ack", frame(TAck, 1, make([]byte, 7)), "ack frame of 7 bytes, not 8"},
		{"long in_ack", frame(TInAck, 1, make([]byte, 9)), "in_ack frame of 9 bytes, not 8"},
		{"short resume", frame(TResume, 1, nil), "resume frame of 0 bytes"},
		{"short signal", frame(TSignal, 1, make([]byte, 3)), "signal frame of 3 bytes, not 4"},
		{"long resize", frame(TResize, 1, make([]byte, 5)), "resize frame of 5 bytes, not 4"},
		{"close_in with a payload", frame(TCloseIn, 1, []byte{0}), "close_in frame with a payload"},
		{"forget with a payload", frame(TForget, 1, []byte{0}), "forget frame with a payload"},
		{"list with a payload", frame(TList, 0, []byte{0}), "list frame with a payload"},
		{"rekeyed with a payload", frame(TRekeyed, 0, []byte("{}")), "rekeyed frame with a payload"},
		{"rekey on a process channel", frame(TRekey, 3, []byte("{}")), "rekey frame on process channel 3"},
		{"rekey without its object", frame(TRekey, 0, nil), "rekey frame without its JSON object"},
		{"json too short", frame(TStarted, 1, []byte("{")), "started frame without its JSON object"},
		{"oversized length", header(TOut, 1, MaxPayload+1), "more than"},
		{"huge length", header(TTable, 0, 0xffffffff), "more than"},
		{"truncated header", []byte{byte(TOut), 0, 0}, "inside a frame header"},
		{"truncated header after a frame", append(frame(TList, 0, nil), 1, 2, 3, 4, 5, 6, 7, 8), "inside a frame header"},
		{"truncated payload", frame(TOut, 1, []byte{1, 'a', 'b'})[:11], "inside a out frame"},
		{"header without payload", header(TAck, 1, 8), "inside a ack frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tc.input))
			var err error
			for err == nil {
				_, err = r.Read()
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) || !IsProtocol(err) {
				t.Fatalf("got %v, want a *ProtocolError", err)
			}
			if !strings.Contains(pe.What, tc.want) {
				t.Fatalf("got %q, want it to say %q", pe.What, tc.want)
			}
		})
	}
}

func TestReaderTransportError(t *testing.T) {
	boom := errors.New("boom")
	// An error inside a payload is the transport's, not a violation.
	r := NewReader(io.MultiReader(bytes.NewReader(header(TOut, 1, 10)), iotest.ErrReader(boom)))
	if _, err := r.Read(); !errors.Is(err, boom) || IsProtocol(err) {
		t.Fatalf("got %v, want boom", err)
	}
	r = NewReader(iotest.ErrReader(boom))
	if _, err := r.Read(); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	// A clean end at a boundary is io.EOF.
	if _, err := NewReader(bytes.NewReader(nil)).Read(); !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func mustJSON(t Type, ch uint32, s string) Frame {
	return Frame{Type: t, Channel: ch, Payload: []byte(s)}
}

func TestDecodeRefuses(t *testing.T) {
	long := strings.Repeat("x", 129)
	for _, tc := range []struct {
		name string
		typ  Type
		json string
		want string
	}{
		{"bad json", TStarted, `{"pid":`, "payload"},
		{"not an object", TStarted, `[1,2]`, "payload"},
		{"wrong field type", TStarted, `{"pid":"1","pgid":1}`, "payload"},
		{"init secret not hex", TInit, `{"secret":"zz` + hex32[2:] + `"}`, "secret"},
		{"init secret short", TInit, `{"secret":"abcd"}`, "secret"},
		{"init window negative", TInit, `{"secret":"` + hex32 + `","window":-1}`, "windows"},
		{"init window huge", TInit, `{"secret":"` + hex32 + `","window":1000000000}`, "windows"},
		{"rekey secret short", TRekey, `{"secret":"abcd"}`, "secret"},
		{"rekey secret not hex", TRekey, `{"secret":"zz` + hex32[2:] + `"}`, "secret"},
		{"rekey without a secret", TRekey, `{}`, "secret"},
		{"challenge nonce short", TChallenge, `{"nonce":"ab"}`, "hex"},
		{"auth mac not hex", TAuth, `{"mac":"` + strings.Repeat("g", 64) + `","nonce":"` + hex32 + `"}`, "hex"},
		{"auth without a nonce", TAuth, `{"mac":"` + hexMA + `"}`, "nonce"},
		{"hello proof not hex", THello, `{"version":"v","pid":1,"window":1,"stdin_window":1,"proof":"zz"}`, "proof"},
		{"hello without version", THello, `{"pid":1,"window":1,"stdin_window":1}`, "no version"},
		{"hello long version", THello, `{"version":"` + strings.Repeat("v", 129) + `","pid":1,"window":1,"stdin_window":1}`, "no version"},
		{"hello pid 0", THello, `{"version":"x","pid":0,"window":1,"stdin_window":1}`, "out of range"},
		{"hello window 0", THello, `{"version":"x","pid":1,"window":0,"stdin_window":1}`, "out of range"},
		{"hello long socket", THello, `{"version":"x","pid":1,"window":1,"stdin_window":1,"socket":"/` + strings.Repeat("s", 108) + `"}`, "socket"},
		{"spawn without id", TSpawn, `{"argv":["sh"]}`, "process id"},
		{"spawn id with a space", TSpawn, `{"id":"a b","argv":["sh"]}`, "printable"},
		{"spawn long id", TSpawn, `{"id":"` + long + `","argv":["sh"]}`, "process id"},
		{"spawn empty argv", TSpawn, `{"id":"p","argv":[]}`, "0 arguments"},
		{"spawn empty program", TSpawn, `{"id":"p","argv":[""]}`, "empty program"},
		{"spawn NUL in argv", TSpawn, `{"id":"p","argv":["sh","a\u0000b"]}`, "NUL"},
		{"spawn NUL in env", TSpawn, `{"id":"p","argv":["sh"],"env":["A=\u0000"]}`, "NUL"},
		{"spawn env without =", TSpawn, `{"id":"p","argv":["sh"],"env":["A"]}`, "NAME=value"},
		{"spawn env without name", TSpawn, `{"id":"p","argv":["sh"],"env":["=1"]}`, "NAME=value"},
		{"spawn relative dir", TSpawn, `{"id":"p","argv":["sh"],"dir":"work"}`, "not absolute"},
		{"started pid 0", TStarted, `{"pid":0,"pgid":1}`, "pid 0"},
		{"started negative pgid", TStarted, `{"pid":1,"pgid":-1}`, "pgid -1"},
		{"spawn_failed code 1", TSpawnFailed, `{"code":1,"error":"x"}`, "code 1"},
		{"spawn_failed long error", TSpawnFailed, `{"code":127,"error":"` + strings.Repeat("e", 4097) + `"}`, "too long"},
		{"exited with code and signal", TExited, `{"code":0,"signal":9,"output":0}`, "code 0, signal 9"},
		{"exited with neither", TExited, `{"code":-1,"output":0}`, "code -1, signal 0"},
		{"exited code 256", TExited, `{"code":256,"output":0}`, "code 256"},
		{"exited signal 65", TExited, `{"code":-1,"signal":65,"output":0}`, "signal 65"},
		{"exited negative output", TExited, `{"code":0,"output":-1}`, "payload"},
		{"exited negative cpu time", TExited, `{"code":0,"output":0,"usage":{"wall_ns":1,"user_ns":-3}}`, "out of range"},
		{"exited cpu time past the bound", TExited, `{"code":0,"output":0,"usage":{"wall_ns":1,"user_ns":5000000000000000000,"sys_ns":5000000000000000000}}`, "out of range"},
		{"table duplicate channels", TTable, `{"processes":[{"channel":1,"id":"a","pid":1,"pgid":1},{"channel":1,"id":"b","pid":2,"pgid":2}]}`, "listed twice"},
		{"table channel 0", TTable, `{"processes":[{"channel":0,"id":"a","pid":1,"pgid":1}]}`, "zero"},
		{"table acked beyond output", TTable, `{"processes":[{"channel":1,"id":"a","pid":1,"pgid":1,"acked":5,"output":4}]}`, "acked 5 of 4"},
		{"table running with an exit", TTable, `{"processes":[{"channel":1,"id":"a","pid":1,"pgid":1,"running":true,"exit":{"code":0}}]}`, "running with an exit"},
		{"table bad exit", TTable, `{"processes":[{"channel":1,"id":"a","pid":1,"pgid":1,"exit":{"code":0,"signal":1}}]}`, "signal 1"},
		{"table bad id", TTable, `{"processes":[{"channel":1,"id":"","pid":1,"pgid":1}]}`, "process id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := mustJSON(tc.typ, channelFor(tc.typ), tc.json)
			if err := CheckShape(f); err != nil {
				t.Fatalf("shape: %v", err)
			}
			err := Decode(f, newMessage(tc.typ))
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a *ProtocolError", err)
			}
			if !strings.Contains(pe.What, tc.want) {
				t.Fatalf("got %q, want it to say %q", pe.What, tc.want)
			}
		})
	}
}

func TestTableTooLong(t *testing.T) {
	m := &Table{Processes: make([]Entry, MaxProcesses+1)}
	if err := m.Validate(); err == nil {
		t.Fatal("a table over MaxProcesses accepted")
	}
}

func TestMAC(t *testing.T) {
	// HMAC-SHA256 (RFC 4231 test case 2).
	got := hex.EncodeToString(MAC([]byte("Jefe"), []byte("what do ya want for nothing?")))
	if got != "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" {
		t.Fatal(got)
	}
	if _, err := DecodeHex(got, 32); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeHex(got, 31); err == nil {
		t.Fatal("wrong length accepted")
	}
}

func TestTypeString(t *testing.T) {
	if TOut.String() != "out" || TResume.String() != "resume" || Type(0).String() != "type(0)" || Type(200).String() != "type(200)" {
		t.Fatal(TOut, TResume, Type(0), Type(200))
	}
}

// TestWriteFrames: frames built with AppendOutHeader and written in one
// WriteFrames read back as the Out frames WriteOut would have written.
func TestWriteFrames(t *testing.T) {
	var built, want bytes.Buffer
	var b []byte
	for i, d := range []string{"x", strings.Repeat("y", MaxData)} {
		stream := byte(1 + i%2)
		b = AppendOutHeader(b, 9, stream, len(d))
		b = append(b, d...)
		if err := NewWriter(&want).WriteOut(9, stream, []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := NewWriter(&built).WriteFrames(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(built.Bytes(), want.Bytes()) {
		t.Fatal("frames built in place differ from WriteOut's")
	}
	r := NewReader(&built)
	for range 2 {
		if f, err := r.Read(); err != nil || f.Type != TOut || f.Channel != 9 {
			t.Fatalf("%v on %d: %v", f.Type, f.Channel, err)
		}
	}
}

func ptr(s string) *string { return &s }

// TestExitedComparable: two decodings of one exit are == (a reattach's
// table exit resent is recognised by it: a pointer field would make them
// differ), and a different usage is not.
func TestExitedComparable(t *testing.T) {
	payload := []byte(`{"code":0,"output":3,"stdout":3,"usage":{"wall_ns":9,"user_ns":3}}`)
	var a, b Exited
	if err := json.Unmarshal(payload, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(payload, &b); err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two decodings of one exit differ: %+v %+v", a, b)
	}
	c := b
	c.Usage.UserNanos++
	if a == c {
		t.Fatal("different usages read as the same exit")
	}
}
