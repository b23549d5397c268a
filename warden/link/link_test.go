package link

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/warden/wire"
)

func TestOpenFresh(t *testing.T) {
	l, _ := openLink(t, 1<<16, 4096)
	h := l.Hello()
	if h.Version != wire.Version || h.Window != 1<<16 || h.StdinWindow != 4096 || l.ackEvery != 1<<14 {
		t.Fatalf("hello %+v, ack every %d", h, l.ackEvery)
	}
	select {
	case <-l.Done():
		t.Fatal("done while up")
	default:
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestOpenReattach(t *testing.T) {
	f, r, w, c := newFake(t)
	nonce := bytes.Repeat([]byte{7}, wire.SecretSize)
	go f.sendJSON(wire.TChallenge, 0, wire.Challenge{Nonce: hex.EncodeToString(nonce)})
	type result struct {
		l   *Link
		h   wire.Hello
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, h, err := Open(context.Background(), r, w, c, Handshake{Secret: testSecret, Reattach: true})
		res <- result{l, h, err}
	}()
	fr := f.expect(wire.TAuth, 0)
	var a wire.Auth
	if err := wire.Decode(fr, &a); err != nil {
		t.Fatal(err)
	}
	if a.MAC != hex.EncodeToString(wire.MAC(testSecret, nonce)) {
		t.Fatalf("mac %s", a.MAC)
	}
	f.sendJSON(wire.THello, 0, provenHello(t, a))
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer func() { _ = got.l.Close() }()
	if got.h.Socket == "" || got.l.window != wire.DefaultWindow {
		t.Fatalf("hello %+v", got.h)
	}
}

// provenHello is a warden's Hello on a reattach whose Auth was a: it
// carries the proof of the test secret for a's nonce.
func provenHello(t testing.TB, a wire.Auth) wire.Hello {
	nonce, err := wire.DecodeHex(a.Nonce, wire.SecretSize)
	if err != nil {
		t.Errorf("the runtime's auth carries no nonce: %v", err)
	}
	h := testHello(wire.DefaultWindow, wire.DefaultStdinWindow)
	h.Proof = hex.EncodeToString(wire.Proof(testSecret, nonce))
	return h
}

// TestOpenReattachNeedsTheProof: whatever answers on the warden's socket
// must prove it holds the secret; a Hello without the proof, with a wrong
// one, or with one for another nonce ends the handshake as a violation.
func TestOpenReattachNeedsTheProof(t *testing.T) {
	other := bytes.Repeat([]byte{9}, wire.SecretSize)
	for _, tc := range []struct {
		name    string
		proof   func(a wire.Auth) string
		version string
	}{
		{"no proof", func(wire.Auth) string { return "" }, ""},
		// An unproven listener is not believed about its version either.
		{"another version, no proof", func(wire.Auth) string { return "" }, "stockade-warden/99"},
		{"a proof under another secret", func(a wire.Auth) string {
			n, _ := wire.DecodeHex(a.Nonce, wire.SecretSize)
			return hex.EncodeToString(wire.Proof(other, n))
		}, ""},
		{"a proof of another nonce", func(wire.Auth) string { return hex.EncodeToString(wire.Proof(testSecret, other)) }, ""},
		{"the runtime's own MAC sent back", func(a wire.Auth) string { return a.MAC }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := openAgainst(t, context.Background(), Handshake{Secret: testSecret, Reattach: true}, func(f *fake) {
				f.sendJSON(wire.TChallenge, 0, wire.Challenge{Nonce: hex32})
				var a wire.Auth
				if err := wire.Decode(f.expect(wire.TAuth, 0), &a); err != nil {
					t.Error(err)
				}
				h := testHello(wire.DefaultWindow, wire.DefaultStdinWindow)
				h.Proof = tc.proof(a)
				if tc.version != "" {
					h.Version = tc.version
				}
				f.sendJSON(wire.THello, 0, h)
			})
			if !wire.IsProtocol(err) || !strings.Contains(err.Error(), "proof") {
				t.Fatalf("Open: %v, want a violation naming the proof", err)
			}
		})
	}
}

// openAgainst runs Open against a fake that answers with script and
// returns Open's error (the link is closed if it opened).
func openAgainst(t *testing.T, ctx context.Context, hs Handshake, script func(f *fake)) (*fake, error) {
	t.Helper()
	f, r, w, c := newFake(t)
	go script(f)
	var err error
	within(t, "Open", func() {
		var l *Link
		l, _, err = Open(ctx, r, w, c, hs)
		if l != nil {
			_ = l.Close()
		}
	})
	return f, err
}

func TestOpenFails(t *testing.T) {
	hello := func(h wire.Hello) func(f *fake) {
		return func(f *fake) {
			if fr, ok := <-f.in; ok && fr.Type == wire.TInit {
				_ = f.w.WriteJSON(wire.THello, 0, h)
			}
		}
	}
	fresh := Handshake{Secret: testSecret}
	for _, tc := range []struct {
		name   string
		hs     Handshake
		script func(f *fake)
		check  func(error) bool
	}{
		{"version", fresh, hello(wire.Hello{Version: "stockade-warden/99", PID: 1, Window: 1, StdinWindow: 1}), func(err error) bool {
			var v *VersionError
			return errors.As(err, &v) && v.Got == "stockade-warden/99"
		}},
		{"version of an invalid hello", fresh, hello(wire.Hello{Version: "stockade-warden/0"}), func(err error) bool {
			var v *VersionError
			return errors.As(err, &v)
		}},
		{"invalid hello", fresh, hello(wire.Hello{Version: wire.Version}), wire.IsProtocol},
		{"window larger than asked", fresh, hello(testHello(wire.DefaultWindow+1, wire.DefaultStdinWindow)), wire.IsProtocol},
		{"challenge on a fresh link", fresh, func(f *fake) {
			_ = f.w.WriteJSON(wire.TChallenge, 0, wire.Challenge{Nonce: hex32})
		}, wire.IsProtocol},
		{"hello on a reattach", Handshake{Secret: testSecret, Reattach: true}, func(f *fake) {
			_ = f.w.WriteJSON(wire.THello, 0, testHello(wire.DefaultWindow, wire.DefaultStdinWindow))
		}, wire.IsProtocol},
		{"bad nonce", Handshake{Secret: testSecret, Reattach: true}, func(f *fake) {
			_ = f.w.WriteJSON(wire.TChallenge, 0, wire.Challenge{Nonce: "00"})
		}, wire.IsProtocol},
		{"garbage", fresh, func(f *fake) { _, _ = f.raw.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")) }, wire.IsProtocol},
		{"eof", fresh, func(f *fake) { <-f.in; _ = f.raw.Close() }, func(err error) bool {
			return errors.Is(err, io.EOF) && !wire.IsProtocol(err)
		}},
		{"short secret", Handshake{Secret: []byte("x")}, func(f *fake) {}, func(err error) bool {
			return err != nil && !wire.IsProtocol(err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := openAgainst(t, context.Background(), tc.hs, tc.script)
			if !tc.check(err) {
				t.Fatalf("got %v", err)
			}
			f.ended() // the transport is closed
		})
	}
}

func TestOpenContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	f, err := openAgainst(t, ctx, Handshake{Secret: testSecret}, func(f *fake) {})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	f.ended()
}

func TestSpawnStartedAndFailed(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p1", Argv: []string{"true"}})
	if p.ID != "p1" || p.PGID != 100+int(p.Channel) {
		t.Fatalf("%+v", p)
	}
	res := make(chan error, 1)
	go func() {
		_, err := l.Spawn(context.Background(), wire.Spawn{ID: "p2", Argv: []string{"nope"}})
		res <- err
	}()
	fr := f.expect(wire.TSpawn, p.Channel+1)
	f.sendJSON(wire.TSpawnFailed, fr.Channel, wire.SpawnFailed{Code: 127, Error: "nope: not found"})
	var se *SpawnError
	if err := <-res; !errors.As(err, &se) || se.Code != 127 || se.Msg != "nope: not found" {
		t.Fatalf("got %v", err)
	}
	l.mu.Lock()
	_, inUse := l.procs[fr.Channel]
	l.mu.Unlock()
	if inUse {
		t.Fatal("the channel of a failed spawn is still in use")
	}
	// The failed channel is free: a frame on it is a violation.
	f.out(fr.Channel, 1, []byte("x"))
	<-l.Done()
	if !wire.IsProtocol(l.Err()) {
		t.Fatal(l.Err())
	}
}

func TestSpawnRefusedLocally(t *testing.T) {
	l, f := openLink(t, 0, 0)
	for _, s := range []wire.Spawn{
		{ID: "p", Argv: nil},
		{ID: "", Argv: []string{"sh"}},
		{ID: "p", Argv: []string{"sh"}, Dir: "rel"},
		{ID: "p", Argv: []string{string(make([]byte, wire.MaxPayload))}},
	} {
		if _, err := l.Spawn(context.Background(), s); err == nil || wire.IsProtocol(err) {
			t.Fatalf("%+v: got %v", s.ID, err)
		}
	}
	f.quiet(20 * time.Millisecond)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestSpawnAbandoned(t *testing.T) {
	l, f := openLink(t, 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := l.Spawn(ctx, wire.Spawn{ID: "late", Argv: []string{"sleep"}})
		res <- err
	}()
	fr := f.expect(wire.TSpawn, 1)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	// The channel stays reserved: the next spawn takes another.
	p := startProc(t, l, f, wire.Spawn{ID: "next", Argv: []string{"true"}})
	if p.Channel == fr.Channel {
		t.Fatal("the abandoned channel was reused")
	}
	// The late Started is answered with SIGKILL, and Forget only once
	// the warden reports the process reaped (a warden may refuse to
	// forget a process it has not reaped); its output meanwhile is
	// dropped.
	f.sendJSON(wire.TStarted, fr.Channel, wire.Started{PID: 5, PGID: 5})
	sig := f.expect(wire.TSignal, fr.Channel)
	if wire.SignalNumber(sig) != int(syscall.SIGKILL) {
		t.Fatal(wire.SignalNumber(sig))
	}
	f.out(fr.Channel, 1, []byte("late output"))
	f.quiet(20 * time.Millisecond)
	f.sendJSON(wire.TReaped, fr.Channel, wire.Reaped{Code: -1, Signal: 9})
	f.expect(wire.TForget, fr.Channel)
	// Frames still in flight for it are ignored.
	f.out(fr.Channel, 1, []byte("more"))
	f.sendJSON(wire.TExited, fr.Channel, wire.Exited{Code: -1, Signal: 9, Output: 15, Stdout: 15})
	f.out(p.Channel, 1, []byte("ok"))
	if s, d, err := p.Next(); err != nil || s != 1 || string(d) != "ok" {
		t.Fatal(s, d, err)
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestSpawnAbandonedFailed(t *testing.T) {
	l, f := openLink(t, 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := l.Spawn(ctx, wire.Spawn{ID: "late", Argv: []string{"x"}})
		res <- err
	}()
	fr := f.expect(wire.TSpawn, 1)
	cancel()
	if err := <-res; err == nil {
		t.Fatal("Spawn returned a process after its ctx ended and before any answer")
	}
	f.sendJSON(wire.TSpawnFailed, fr.Channel, wire.SpawnFailed{Code: 126, Error: "x: permission denied"})
	f.quiet(20 * time.Millisecond)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestOutputAndExit(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	f.out(p.Channel, 1, []byte("hello "))
	f.out(p.Channel, 1, []byte("world\n"))
	f.out(p.Channel, 2, []byte("oops\n"))
	f.out(p.Channel, 1, []byte("bye\n"))
	f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: 3, Output: 21, Stdout: 21, OOMKills: 3})
	<-p.Exited()
	if x, ok := p.Exit(); !ok || x.Code != 3 || x.Output != 21 {
		t.Fatal(x, ok)
	}
	want := []struct {
		s byte
		d string
	}{{1, "hello world\n"}, {2, "oops\n"}, {1, "bye\n"}}
	for _, w := range want {
		s, d, err := p.Next()
		if err != nil || s != w.s || string(d) != w.d {
			t.Fatalf("got %d %q %v, want %d %q", s, d, err, w.s, w.d)
		}
	}
	if p.Offset() != 21 {
		t.Fatal(p.Offset())
	}
	for range 2 {
		if _, _, err := p.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("got %v, want io.EOF", err)
		}
	}
	if err := p.Forget(); err != nil {
		t.Fatal(err)
	}
	f.expect(wire.TForget, p.Channel)
	if _, err := p.Write([]byte("x")); err == nil {
		t.Fatal("write after forget")
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, ErrForgotten) {
		t.Fatal(err)
	}
}

func TestExitBeforeOutputArrives(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	f.out(p.Channel, 1, []byte("ab"))
	f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: 0, Output: 5, Stdout: 5})
	got := make(chan string, 1)
	go func() {
		out, _, err := readAll(p)
		got <- fmt.Sprintf("%s %v", out, err)
	}()
	<-p.Exited()
	time.Sleep(10 * time.Millisecond)
	f.out(p.Channel, 1, []byte("cde"))
	if g := <-got; g != "abcde <nil>" {
		t.Fatal(g)
	}
}

// acks collects the runtime's Acks on ch until quiet for d.
func acks(f *fake, ch uint32, d time.Duration) []uint64 {
	var offs []uint64
	for {
		select {
		case fr, ok := <-f.in:
			if !ok {
				return offs
			}
			if fr.Type != wire.TAck || fr.Channel != ch {
				f.t.Fatalf("unexpected %v on %d", fr.Type, fr.Channel)
			}
			offs = append(offs, wire.Offset(fr))
		case <-time.After(d):
			return offs
		}
	}
}

func TestAckBatching(t *testing.T) {
	const window = 64 << 10
	l, f := openLink(t, window, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	// A full window in 1 KiB frames, the streams alternating (no merging).
	chunk := bytes.Repeat([]byte("z"), 1024)
	for i := range 64 {
		f.out(p.Channel, byte(1+i%2), chunk)
	}
	// Read 20 chunks (the 21st Next releases the 20th), then stall.
	for range 21 {
		if _, d, err := p.Next(); err != nil || len(d) != 1024 {
			t.Fatal(len(d), err)
		}
	}
	got := acks(f, p.Channel, 100*time.Millisecond)
	if len(got) != 1 || got[0] != 16<<10 {
		t.Fatalf("acks %v, want one at 16 KiB", got)
	}
	// A stalled consumer acknowledges nothing more; a full window stays
	// full (more output would be a violation).
	f.quiet(100 * time.Millisecond)

	// Reading on: an ack each quarter window, and one before blocking.
	for range 43 {
		if _, _, err := p.Next(); err != nil {
			t.Fatal(err)
		}
	}
	wait := make(chan error, 1)
	go func() { _, _, err := p.Next(); wait <- err }() // releases the last, then blocks
	got = acks(f, p.Channel, 100*time.Millisecond)
	if len(got) != 3 || got[0] != 32<<10 || got[1] != 48<<10 || got[2] != 64<<10 {
		t.Fatalf("acks %v, want 32, 48, 64 KiB", got)
	}
	// The window is free again.
	for range 64 {
		f.out(p.Channel, 1, chunk)
	}
	if err := <-wait; err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestMergedChunks(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	var want []byte
	for i := range 40 {
		d := bytes.Repeat([]byte{byte(i)}, 5000)
		want = append(want, d...)
		f.out(p.Channel, 1, d)
	}
	f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: 0, Output: uint64(len(want)), Stdout: uint64(len(want))})
	<-p.Exited()
	var got []byte
	for {
		_, d, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || len(d) > l.chunk {
			t.Fatal(len(d), err)
		}
		got = append(got, d...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("output differs")
	}
}

func TestCloseStopsAcking(t *testing.T) {
	const window = 4096
	l, f := openLink(t, window, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	f.out(p.Channel, 1, make([]byte, 3000))
	if _, _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, _, err := p.Next(); !errors.Is(err, ErrProcClosed) {
		t.Fatal(err)
	}
	f.out(p.Channel, 2, make([]byte, 1096)) // up to the window: fine
	f.quiet(50 * time.Millisecond)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	f.out(p.Channel, 1, []byte("x")) // beyond it: a violation
	<-l.Done()
	if !wire.IsProtocol(l.Err()) {
		t.Fatal(l.Err())
	}
}

func TestStdinCredit(t *testing.T) {
	const sw = 4096
	l, f := openLink(t, 0, sw)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"cat"}, Stdin: true})
	input := make([]byte, 20000)
	for i := range input {
		input[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() {
		n, err := p.Write(input)
		if err == nil && n != len(input) {
			err = fmt.Errorf("wrote %d", n)
		}
		if err == nil {
			err = p.CloseStdin()
		}
		wrote <- err
	}()
	var got []byte
	var acked uint64
	for {
		fr := f.expect(wire.TIn, p.Channel)
		if fr.Type == wire.TCloseIn {
			break
		}
		got = append(got, fr.Payload...)
		if uint64(len(got))-acked > sw {
			t.Fatalf("%d bytes unacknowledged, window %d", uint64(len(got))-acked, sw)
		}
		if uint64(len(got))-acked == sw {
			// Without credit the writer waits.
			f.quiet(30 * time.Millisecond)
			acked += 1000 // a partial ack
			_ = f.w.WriteOffset(wire.TInAck, p.Channel, acked)
		}
		if len(got) == len(input) {
			break
		}
	}
	if err := f.w.WriteOffset(wire.TInAck, p.Channel, uint64(len(got))); err != nil {
		t.Fatal(err)
	}
	f.expect(wire.TCloseIn, p.Channel)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, input) {
		t.Fatal("stdin differs")
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, ErrStdinClosed) {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); !errors.Is(err, ErrStdinClosed) {
		t.Fatal(err)
	}
	// Without Spawn.Stdin there is no stdin.
	q := startProc(t, l, f, wire.Spawn{ID: "q", Argv: []string{"cat"}})
	if _, err := q.Write([]byte("x")); !errors.Is(err, ErrNoStdin) {
		t.Fatal(err)
	}
}

func TestStdinUnblocks(t *testing.T) {
	l, f := openLink(t, 0, 4096)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"cat"}, Stdin: true})
	q := startProc(t, l, f, wire.Spawn{ID: "q", Argv: []string{"cat"}, Stdin: true})
	res := make(chan error, 2)
	go func() { _, err := p.Write(make([]byte, 5000)); res <- err }()
	go func() { _, err := q.Write(make([]byte, 5000)); res <- err }()
	f.expectAny(wire.TIn, p.Channel, q.Channel)
	f.expectAny(wire.TIn, p.Channel, q.Channel)
	// The exit ends p's Write; CloseStdin ends q's.
	f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: 0})
	if err := <-res; !errors.Is(err, ErrExited) {
		t.Fatal(err)
	}
	if err := q.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.Is(err, ErrStdinClosed) {
		t.Fatal(err)
	}
	f.expect(wire.TCloseIn, q.Channel)
}

func TestSignalResize(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"sh"}, TTY: true})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if fr := f.expect(wire.TSignal, p.Channel); wire.SignalNumber(fr) != int(syscall.SIGTERM) {
		t.Fatal(wire.SignalNumber(fr))
	}
	if err := p.Resize(50, 132); err != nil {
		t.Fatal(err)
	}
	if r, c := wire.Size(f.expect(wire.TResize, p.Channel)); r != 50 || c != 132 {
		t.Fatal(r, c)
	}
}

// reattach opens a reattach link against a fake.
func reattach(t *testing.T) (*Link, *fake) {
	t.Helper()
	f, r, w, c := newFake(t)
	go func() {
		_ = f.w.WriteJSON(wire.TChallenge, 0, wire.Challenge{Nonce: hex32})
		if fr, ok := <-f.in; ok && fr.Type == wire.TAuth {
			var a wire.Auth
			if wire.Decode(fr, &a) == nil {
				_ = f.w.WriteJSON(wire.THello, 0, provenHello(t, a))
			}
		}
	}()
	l, _, err := Open(context.Background(), r, w, c, Handshake{Secret: testSecret, Reattach: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, f
}

func TestListResume(t *testing.T) {
	l, f := reattach(t)
	table := wire.Table{Processes: []wire.Entry{
		{Channel: 1, ID: "run", PID: 10, PGID: 10, Running: true, Acked: 100, Output: 160},
		{Channel: 2, ID: "done", PID: 11, PGID: 11, Exit: &wire.Exited{Code: 0, Output: 50, Stdout: 50}, Acked: 40, Output: 50},
		{Channel: 3, ID: "lost", PID: 12, PGID: 12, Running: true},
	}}
	res := make(chan []wire.Entry, 1)
	go func() {
		t, err := l.List(context.Background())
		if err != nil {
			t = nil
		}
		res <- t
	}()
	f.expect(wire.TList, 0)
	f.sendJSON(wire.TTable, 0, table)
	entries := <-res
	if len(entries) != 3 || entries[1].Exit == nil || entries[1].Exit.Output != 50 {
		t.Fatalf("%+v", entries)
	}

	// Out of range offsets are refused.
	for _, from := range []uint64{99, 161} {
		if _, err := l.Resume(context.Background(), entries[0], from); err == nil {
			t.Fatalf("resume from %d accepted", from)
		}
	}
	p, err := l.Resume(context.Background(), entries[0], 120)
	if err != nil {
		t.Fatal(err)
	}
	if wire.Offset(f.expect(wire.TResume, 1)) != 120 {
		t.Fatal("resume offset")
	}
	if fr, _ := f.next(); fr.Type != wire.TAck || wire.Offset(fr) != 120 {
		t.Fatalf("%v %v", fr.Type, fr.Payload)
	}
	if _, err := l.Resume(context.Background(), entries[0], 120); err == nil {
		t.Fatal("a second resume of the channel accepted")
	}
	if p.Offset() != 120 || p.PID != 10 || p.OOMKills != -1 {
		t.Fatal(p.Offset(), p.PID)
	}
	f.out(1, 1, []byte("0123456789"))
	if _, d, err := p.Next(); err != nil || string(d) != "0123456789" || p.Offset() != 130 {
		t.Fatal(d, err, p.Offset())
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, ErrNoStdin) {
		t.Fatal(err)
	}
	_ = f.w.WriteOffset(wire.TInAck, 1, 999) // a stdin offset from the last link: ignored

	// An exit known from the table.
	q, err := l.Resume(context.Background(), entries[1], 50)
	if err != nil {
		t.Fatal(err)
	}
	f.expect(wire.TResume, 2)
	select {
	case <-q.Exited():
	default:
		t.Fatal("exit not known")
	}
	// The warden's first frame after the Resume of an exited process: its
	// changes; the output ends only with them.
	f.sendJSON(wire.TChanges, 2, wire.Changes{Created: 1, Entries: []wire.Change{{Op: wire.OpCreated, Path: "/workspace/work/a", Kind: wire.KindFile}}})
	if _, _, err := q.Next(); !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if x, ok := q.Exit(); !ok || x.Output != 50 {
		t.Fatal(x, ok)
	}
	// The warden may send the exit the table had once more.
	f.sendJSON(wire.TExited, 2, wire.Exited{Code: 0, Output: 50, Stdout: 50})

	// Spawn does not take a listed channel.
	s := startProc(t, l, f, wire.Spawn{ID: "new", Argv: []string{"x"}})
	if s.Channel <= 3 {
		t.Fatalf("spawn on listed channel %d", s.Channel)
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestListContext(t *testing.T) {
	l, f := openLink(t, 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { _, err := l.List(ctx); res <- err }()
	f.expect(wire.TList, 0)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The late answer is no violation; the next List gets its own.
	f.sendJSON(wire.TTable, 0, wire.Table{})
	go func() {
		t, err := l.List(context.Background())
		if err == nil && len(t) != 1 {
			err = fmt.Errorf("table %+v", t)
		}
		res <- err
	}()
	f.expect(wire.TList, 0)
	f.sendJSON(wire.TTable, 0, wire.Table{Processes: []wire.Entry{{Channel: 9, ID: "x", PID: 1, PGID: 1}}})
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

func TestClose(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}, Stdin: true})
	res := make(chan error, 1)
	go func() { _, _, err := p.Next(); res <- err }()
	time.Sleep(10 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if err := <-res; !errors.Is(err, ErrLinkClosed) {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), ErrLinkClosed) {
		t.Fatal(l.Err())
	}
	<-p.Exited()
	if _, ok := p.Exit(); ok {
		t.Fatal("an exit after close")
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, ErrLinkClosed) {
		t.Fatal(err)
	}
	if _, err := l.Spawn(context.Background(), wire.Spawn{ID: "q", Argv: []string{"x"}}); !errors.Is(err, ErrLinkClosed) {
		t.Fatal(err)
	}
	if _, err := l.List(context.Background()); !errors.Is(err, ErrLinkClosed) {
		t.Fatal(err)
	}
	f.ended()
}

func TestLinkEOF(t *testing.T) {
	l, f := openLink(t, 0, 0)
	done := startProc(t, l, f, wire.Spawn{ID: "done", Argv: []string{"x"}})
	running := startProc(t, l, f, wire.Spawn{ID: "running", Argv: []string{"x"}})
	f.out(done.Channel, 1, []byte("all"))
	f.sendJSON(wire.TExited, done.Channel, wire.Exited{Code: 0, Output: 3, Stdout: 3})
	f.out(running.Channel, 1, []byte("part"))
	<-done.Exited()
	_ = f.raw.Close()
	<-l.Done()
	if !errors.Is(l.Err(), io.EOF) || wire.IsProtocol(l.Err()) {
		t.Fatal(l.Err())
	}
	// A process whose output all arrived is read to its end.
	if out, _, err := readAll(done); err != nil || string(out) != "all" {
		t.Fatal(out, err)
	}
	// A process cut off by the link's end: what arrived is handed on
	// first, then the link's error.
	if s, d, err := running.Next(); err != nil || s != 1 || string(d) != "part" {
		t.Fatalf("got %d %q %v, want the output received before the end", s, d, err)
	}
	// The cut is not the end: the error matches the link's, never io.EOF.
	var cut *OutputCutError
	if _, _, err := running.Next(); !errors.As(err, &cut) || cut.Err != l.Err() || errors.Is(err, io.EOF) { //nolint:errorlint // the very error the link ended with
		t.Fatalf("got %v, want the link's error, cut", err)
	}
	if off := running.Offset(); off != 4 {
		t.Fatalf("offset %d after the link's end, want the 4 bytes received", off)
	}
	<-running.Exited()
	if _, ok := running.Exit(); ok {
		t.Fatal("exit")
	}
}

// TestViolations: every violation ends the link with a *ProtocolError and
// unblocks every caller.
func TestViolations(t *testing.T) {
	const window, sw = 4096, 1024
	exited := func(f *fake, p *Proc, output uint64) {
		f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: 0, Output: output, Stdout: output})
		<-p.Exited()
	}
	for _, tc := range []struct {
		name   string
		inject func(f *fake, p *Proc)
		want   string
	}{
		{"out beyond the window", func(f *fake, p *Proc) {
			f.out(p.Channel, 1, make([]byte, window))
			f.sendAsync(wire.TOut, p.Channel, []byte{1, 0})
		}, "more than the window"},
		{"out on an unused channel", func(f *fake, p *Proc) { f.sendAsync(wire.TOut, 1000, []byte{1, 0}) }, "not in use"},
		{"started on an unused channel", func(f *fake, p *Proc) {
			f.sendJSON(wire.TStarted, 1000, wire.Started{PID: 1, PGID: 1})
		}, "not in use"},
		{"exited on an unused channel", func(f *fake, p *Proc) {
			_ = f.w.WriteJSON(wire.TExited, 1000, wire.Exited{Code: 0})
		}, "not in use"},
		{"exited before its changes", func(f *fake, p *Proc) {
			_ = f.w.WriteJSON(wire.TExited, p.Channel, wire.Exited{Code: 0})
		}, "before its changes"},
		{"changes on an unused channel", func(f *fake, p *Proc) {
			_ = f.w.WriteJSON(wire.TChanges, 1000, wire.Changes{Untracked: "x"})
		}, "not in use"},
		{"changes after the exited", func(f *fake, p *Proc) {
			f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: 0})
			_ = f.w.WriteJSON(wire.TChanges, p.Channel, wire.Changes{Untracked: "x"})
		}, "after its exited"},
		{"changes that do not add up", func(f *fake, p *Proc) {
			_ = f.w.WriteJSON(wire.TChanges, p.Channel, wire.Changes{Created: 2, Entries: []wire.Change{{Op: wire.OpCreated, Path: "/workspace/a", Kind: wire.KindFile}}})
		}, "do not add up"},
		{"changes outside the workspace", func(f *fake, p *Proc) {
			_ = f.w.WriteJSON(wire.TChanges, p.Channel, wire.Changes{Created: 1, Entries: []wire.Change{{Op: wire.OpCreated, Path: "/etc/passwd", Kind: wire.KindFile}}})
		}, "not a clean path under /workspace"},
		{"in_ack on an unused channel", func(f *fake, p *Proc) { _ = f.w.WriteOffset(wire.TInAck, 1000, 0) }, "not in use"},
		{"spawn_failed on an unused channel", func(f *fake, p *Proc) {
			f.sendJSON(wire.TSpawnFailed, 1000, wire.SpawnFailed{Code: 127})
		}, "not in use"},
		{"a second started", func(f *fake, p *Proc) {
			f.sendJSON(wire.TStarted, p.Channel, wire.Started{PID: 1, PGID: 1})
		}, "a second started"},
		{"spawn_failed after started", func(f *fake, p *Proc) {
			f.sendJSON(wire.TSpawnFailed, p.Channel, wire.SpawnFailed{Code: 127})
		}, "which started"},
		{"in_ack beyond what was sent", func(f *fake, p *Proc) { _ = f.w.WriteOffset(wire.TInAck, p.Channel, sw+1) }, "beyond the 1024 sent"},
		{"in_ack going back", func(f *fake, p *Proc) {
			_ = f.w.WriteOffset(wire.TInAck, p.Channel, 10)
			_ = f.w.WriteOffset(wire.TInAck, p.Channel, 9)
		}, "back from 10"},
		{"exited below the output received", func(f *fake, p *Proc) {
			f.out(p.Channel, 1, []byte("abc"))
			f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: 0, Output: 2, Stdout: 2})
		}, "less than the 3 received"},
		{"out after exited beyond its output", func(f *fake, p *Proc) {
			exited(f, p, 2)
			f.out(p.Channel, 1, []byte("ab"))
			f.out(p.Channel, 1, []byte("c"))
		}, "beyond its exited output 2"},
		{"a second exited", func(f *fake, p *Proc) {
			exited(f, p, 0)
			_ = f.w.WriteJSON(wire.TExited, p.Channel, wire.Exited{Code: 0})
		}, "a second exited"},
		{"a table more than asked for", func(f *fake, p *Proc) {
			f.sendJSON(wire.TTable, 0, wire.Table{})
			f.sendJSON(wire.TTable, 0, wire.Table{})
		}, "nobody asked"},
		{"hello again", func(f *fake, p *Proc) {
			f.sendJSON(wire.THello, 0, testHello(window, sw))
		}, "after the handshake"},
		{"a runtime's frame", func(f *fake, p *Proc) { _ = f.w.WriteOffset(wire.TAck, p.Channel, 0) }, "ack frame from the warden"},
		{"signal from the warden", func(f *fake, p *Proc) { _ = f.w.WriteSignal(p.Channel, 9) }, "signal frame from the warden"},
		{"unknown type", func(f *fake, p *Proc) { _, _ = f.raw.Write(frame(99, 1, nil)) }, "unknown frame type 99"},
		{"out of stream 3", func(f *fake, p *Proc) { _, _ = f.raw.Write(frame(wire.TOut, p.Channel, []byte{3, 'x'})) }, "stream 3"},
		{"oversized frame", func(f *fake, p *Proc) { _, _ = f.raw.Write(header(wire.TOut, p.Channel, wire.MaxPayload+1)) }, "more than"},
		{"bad json", func(f *fake, p *Proc) { _, _ = f.raw.Write(frame(wire.TExited, p.Channel, []byte(`{"code":`))) }, "exited payload"},
		{"invalid exited", func(f *fake, p *Proc) {
			_, _ = f.raw.Write(frame(wire.TExited, p.Channel, []byte(`{"code":1,"signal":9}`)))
		}, "code 1, signal 9"},
		{"truncated mid-payload", func(f *fake, p *Proc) {
			_, _ = f.raw.Write(frame(wire.TOut, p.Channel, []byte{1, 'a', 'b'})[:11])
			_ = f.raw.Close()
		}, "ended inside a out frame"},
		{"truncated mid-header", func(f *fake, p *Proc) {
			_, _ = f.raw.Write([]byte{byte(wire.TOut), 0})
			_ = f.raw.Close()
		}, "inside a frame header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, f := openLink(t, window, sw)
			p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}, Stdin: true})
			q := startProc(t, l, f, wire.Spawn{ID: "q", Argv: []string{"x"}, Stdin: true})
			// p's stdin: a window sent, nothing acknowledged yet.
			if n, err := p.Write(make([]byte, sw)); n != sw || err != nil {
				t.Fatal(n, err)
			}
			f.expect(wire.TIn, p.Channel)

			// Callers blocked on the link: Next and Write on q, a
			// pending Spawn and List.
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			wg.Add(4)
			go func() { defer wg.Done(); _, _, err := q.Next(); errs <- err }()
			go func() {
				defer wg.Done()
				_, err := q.Write(make([]byte, sw+1))
				errs <- err
			}()
			f.expect(wire.TIn, q.Channel)
			go func() {
				defer wg.Done()
				_, err := l.Spawn(context.Background(), wire.Spawn{ID: "r", Argv: []string{"x"}})
				errs <- err
			}()
			f.expect(wire.TSpawn, q.Channel+1)
			go func() { defer wg.Done(); _, err := l.List(context.Background()); errs <- err }()
			f.expect(wire.TList, 0)

			tc.inject(f, p)
			within(t, "the blocked callers", wg.Wait)
			close(errs)
			for err := range errs {
				if err == nil && tc.name == "a table more than asked for" {
					continue // the List, answered by the first
				}
				if !wire.IsProtocol(err) {
					t.Fatalf("a caller got %v, want a *ProtocolError", err)
				}
			}
			<-l.Done()
			var pe *wire.ProtocolError
			if !errors.As(l.Err(), &pe) || !contains(pe.What, tc.want) {
				t.Fatalf("link error %v, want a *ProtocolError saying %q", l.Err(), tc.want)
			}
			<-q.Exited()
			if _, ok := q.Exit(); ok {
				t.Fatal("q exited")
			}
			if _, _, err := q.Next(); !wire.IsProtocol(err) {
				t.Fatal(err)
			}
			if _, err := p.Write([]byte("x")); !wire.IsProtocol(err) {
				t.Fatal(err)
			}
			f.ended()
		})
	}
}

func contains(s, sub string) bool { return bytes.Contains([]byte(s), []byte(sub)) }

// TestOutBeforeStarted: Started precedes every other frame of its channel.
func TestOutBeforeStarted(t *testing.T) {
	l, f := openLink(t, 0, 0)
	go func() { _, _ = l.Spawn(context.Background(), wire.Spawn{ID: "p", Argv: []string{"x"}}) }() // fails with the link: checked below
	fr := f.expect(wire.TSpawn, 1)
	f.out(fr.Channel, 1, []byte("early"))
	<-l.Done()
	if !wire.IsProtocol(l.Err()) || !contains(l.Err().Error(), "before its started") {
		t.Fatal(l.Err())
	}
}

func TestForgetEarly(t *testing.T) {
	l, f := openLink(t, 4096, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	f.out(p.Channel, 1, []byte("abc"))
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.Forget(); err != nil {
		t.Fatal(err)
	}
	f.expect(wire.TSignal, p.Channel)
	f.expect(wire.TForget, p.Channel)
	if err := p.Forget(); !errors.Is(err, ErrForgotten) {
		t.Fatal(err)
	}
	<-p.Exited()
	if _, ok := p.Exit(); ok {
		t.Fatal("an exit")
	}
	// In-flight frames of a forgotten channel are ignored, even beyond
	// the window.
	f.out(p.Channel, 1, make([]byte, 5000))
	f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: -1, Signal: 9, Output: 5003, Stdout: 5003})
	q := startProc(t, l, f, wire.Spawn{ID: "q", Argv: []string{"x"}})
	if q.Channel == p.Channel {
		t.Fatal("channel reused")
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

// TestConcurrentProcs runs 50 processes through a model warden at once:
// stdin echoed to output (both streams), with signals and spawns racing.
func TestConcurrentProcs(t *testing.T) {
	l, m := openModel(t, 64<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- echoOnce(l, i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// The last Forget may still be on its way.
	for deadline := time.Now().Add(waitFor); ; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		sigs, procs := len(m.sigs), len(m.procs)
		m.mu.Unlock()
		if sigs == 50 && procs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d signals, %d processes left", sigs, procs)
		}
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func echoOnce(l *Link, i int) error {
	cmd := "echo"
	if i%2 == 1 {
		cmd = "echo2"
	}
	p, err := l.Spawn(context.Background(), wire.Spawn{ID: fmt.Sprintf("p%d", i), Argv: []string{cmd}, Stdin: true})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(i), 1))
	input := make([]byte, 100<<10+rng.IntN(100<<10))
	for j := range input {
		input[j] = byte(rng.Uint32())
	}
	werr := make(chan error, 1)
	go func() {
		b := input
		for len(b) > 0 {
			k := min(len(b), 1+rng.IntN(20000))
			if _, err := p.Write(b[:k]); err != nil {
				werr <- err
				return
			}
			b = b[k:]
		}
		if err := p.Signal(syscall.SIGWINCH); err != nil {
			werr <- err
			return
		}
		werr <- p.CloseStdin()
	}()
	stdout, stderr, err := readAll(p)
	if err != nil {
		return err
	}
	if err := <-werr; err != nil {
		return err
	}
	if len(stdout)+len(stderr) != len(input) || (cmd == "echo" && !bytes.Equal(stdout, input)) {
		return fmt.Errorf("p%d: %d+%d bytes of output for %d of input", i, len(stdout), len(stderr), len(input))
	}
	if x, ok := p.Exit(); !ok || x.Output != uint64(len(input)) || p.Offset() != x.Output {
		return fmt.Errorf("p%d: exit %+v %v at %d", i, x, ok, p.Offset())
	}
	return p.Forget()
}

func BenchmarkLinkThroughput(b *testing.B) {
	for _, window := range []int{256 << 10, wire.DefaultWindow, 4 << 20} {
		b.Run(fmt.Sprintf("window=%dKiB", window>>10), func(b *testing.B) {
			l, _ := openModel(b, window)
			const per = 1 << 20
			b.SetBytes(per)
			b.ReportAllocs()
			b.ResetTimer()
			p, err := l.Spawn(context.Background(), wire.Spawn{ID: "bench", Argv: []string{"out", fmt.Sprint(b.N * per)}})
			if err != nil {
				b.Fatal(err)
			}
			var n int
			for {
				_, d, err := p.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n += len(d)
			}
			if n != b.N*per {
				b.Fatalf("%d bytes", n)
			}
		})
	}
}

// TestReapedAheadOfOutput: Reaped tells the status while output is still
// pending (nobody read it); Exited later agrees; a second Reaped that
// disagrees breaks the protocol.
func TestReapedAheadOfOutput(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	f.out(p.Channel, 1, []byte("unread"))
	select {
	case <-p.Reaped():
		t.Fatal("reaped before Reaped")
	default:
	}
	f.sendJSON(wire.TReaped, p.Channel, wire.Reaped{Code: -1, Signal: 9, OOMKills: 1})
	<-p.Reaped()
	if r, ok := p.Reap(); !ok || r.Signal != 9 || r.Code != -1 {
		t.Fatalf("reap %+v %v", r, ok)
	}
	select {
	case <-p.Exited():
		t.Fatal("exited before Exited")
	default:
	}
	f.sendJSON(wire.TReaped, p.Channel, wire.Reaped{Code: -1, Signal: 9, OOMKills: 1}) // a repeat: fine
	f.sendJSON(wire.TExited, p.Channel, wire.Exited{Code: -1, Signal: 9, Output: 6, Stdout: 6})
	<-p.Exited()
	f.sendJSON(wire.TReaped, p.Channel, wire.Reaped{Code: 0})
	<-l.Done()
	if !wire.IsProtocol(l.Err()) {
		t.Fatalf("a second, different Reaped: %v, want a protocol error", l.Err())
	}
}

// TestReapedEndsWithLink: a link that ends before the reap closes Reaped
// with ok false.
func TestReapedEndsWithLink(t *testing.T) {
	l, f := openLink(t, 0, 0)
	p := startProc(t, l, f, wire.Spawn{ID: "p", Argv: []string{"x"}})
	l.Abort(errors.New("given up"))
	<-p.Reaped()
	if _, ok := p.Reap(); ok {
		t.Fatal("reaped after the link ended")
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "aborted: given up") || errors.Is(err, ErrLinkClosed) {
		t.Fatalf("abort: %v", err)
	}
}

// TestOutputCutError: the cut matches the link's error (and what it
// wraps), never io.EOF.
func TestOutputCutError(t *testing.T) {
	cases := []struct {
		name    string
		link    error
		matches error
	}{
		{"closed", ErrLinkClosed, ErrLinkClosed},
		{"eof", fmt.Errorf("warden: link: reading from the warden: %w", io.EOF), nil},
		{"unexpected eof", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), nil},
		{"protocol", wire.Violation("bad"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := error(&OutputCutError{Err: tc.link})
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%v matches an end of file", err)
			}
			if tc.matches != nil && !errors.Is(err, tc.matches) {
				t.Errorf("%v does not match %v", err, tc.matches)
			}
			if wire.IsProtocol(err) != wire.IsProtocol(tc.link) {
				t.Errorf("%v: IsProtocol %v, the link's %v", err, wire.IsProtocol(err), wire.IsProtocol(tc.link))
			}
		})
	}
}

// TestRekey: Rekey sends the new secret and returns on Rekeyed; every other
// end says the warden's secret is unknown (ErrRekeyUnconfirmed, with its
// cause), except a refusal before anything was sent.
func TestRekey(t *testing.T) {
	newSecret := bytes.Repeat([]byte{0xa5}, wire.SecretSize)
	for _, tc := range []struct {
		name   string
		secret []byte
		// warden acts once the Rekey arrived (nil: nothing arrives).
		warden      func(t *testing.T, l *Link, f *fake, cancel context.CancelFunc)
		want        []error // the error matches each; nil: success
		unconfirmed bool
	}{
		{"answered", newSecret, func(t *testing.T, l *Link, f *fake, _ context.CancelFunc) {
			if err := f.w.Write(wire.TRekeyed, 0); err != nil {
				t.Error(err)
			}
		}, nil, false},
		{"short secret", newSecret[:wire.SecretSize-1], nil, []error{}, false},
		{"context ended", newSecret, func(t *testing.T, l *Link, f *fake, cancel context.CancelFunc) { cancel() },
			[]error{context.Canceled}, true},
		{"link closed", newSecret, func(t *testing.T, l *Link, f *fake, _ context.CancelFunc) { _ = l.Close() },
			[]error{ErrLinkClosed}, true},
		{"warden's output ended", newSecret, func(t *testing.T, l *Link, f *fake, _ context.CancelFunc) { _ = f.raw.Close() },
			[]error{io.EOF}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, f := openLink(t, 0, 0)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- l.Rekey(ctx, tc.secret) }()
			if tc.warden != nil {
				fr := f.expect(wire.TRekey, 0)
				var m wire.Rekey
				if err := wire.Decode(fr, &m); err != nil {
					t.Fatal(err)
				}
				if m.Secret != hex.EncodeToString(tc.secret) {
					t.Fatalf("rekey to %s, want %x", m.Secret, tc.secret)
				}
				tc.warden(t, l, f, cancel)
			}
			var err error
			within(t, "Rekey", func() { err = <-res })
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("rekey succeeded")
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("error %v does not match %v", err, w)
				}
			}
			if errors.Is(err, ErrRekeyUnconfirmed) != tc.unconfirmed {
				t.Errorf("error %v: unconfirmed %v, want %v", err, errors.Is(err, ErrRekeyUnconfirmed), tc.unconfirmed)
			}
		})
	}
}

// TestRekeyOrder: answers go to the requests in order; a late answer to an
// abandoned Rekey is no violation, and the next Rekey waits for its own.
func TestRekeyOrder(t *testing.T) {
	l, f := openLink(t, 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- l.Rekey(ctx, testSecret) }()
	f.expect(wire.TRekey, 0)
	cancel()
	if err := <-res; !errors.Is(err, ErrRekeyUnconfirmed) || !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	go func() { res <- l.Rekey(context.Background(), testSecret) }()
	f.expect(wire.TRekey, 0)
	// The first answer belongs to the abandoned request.
	if err := f.w.Write(wire.TRekeyed, 0); err != nil {
		t.Fatal(err)
	}
	// A List behind it: once its Table is in, the link has read that
	// Rekeyed.
	listed := make(chan error, 1)
	go func() { _, err := l.List(context.Background()); listed <- err }()
	f.expect(wire.TList, 0)
	f.sendJSON(wire.TTable, 0, wire.Table{})
	within(t, "List", func() {
		if err := <-listed; err != nil {
			t.Error(err)
		}
	})
	select {
	case err := <-res:
		t.Fatalf("the second rekey took the first one's answer: %v", err)
	default:
	}
	if err := f.w.Write(wire.TRekeyed, 0); err != nil {
		t.Fatal(err)
	}
	within(t, "the second Rekey", func() {
		if err := <-res; err != nil {
			t.Error(err)
		}
	})
	// A third answer answers nothing: the link ends.
	if err := f.w.Write(wire.TRekeyed, 0); err != nil {
		t.Fatal(err)
	}
	within(t, "the link's end", func() { <-l.Done() })
	if !wire.IsProtocol(l.Err()) {
		t.Fatalf("link ended with %v, want a violation", l.Err())
	}
	if err := l.Rekey(context.Background(), testSecret); err == nil || errors.Is(err, ErrRekeyUnconfirmed) || !wire.IsProtocol(err) {
		t.Fatalf("rekey on an ended link: %v", err)
	}
}
