package enginetest

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
	"github.com/stockade/stockade/warden/wire"
)

// testWardens: an engine without a warden says unsupported for each warden
// operation. One with a warden starts one whose first link takes Init and
// answers Hello (a pid, a reattach socket under TmpDir) and runs a spawn to
// its exit; a second link through the socket passes the reattach handshake
// under the same secret and reaches the same warden; once that warden is
// retired, a reattach finds none.
func testWardens(t *testing.T, v env) {
	ctx := ctxT(t)
	sb := v.started(t)
	if w, ok := v.e.(dockerio.WardenDelivery); !ok || !w.HasWarden() {
		_, err := v.e.StartWarden(ctx, sb, io.Discard)
		wantCode(t, "StartWarden without a warden", err, spec.CodeUnsupported)
		_, err = v.e.AttachWarden(ctx, sb, dockerio.TmpDir+"/w.sock", io.Discard)
		wantCode(t, "AttachWarden without a warden", err, spec.CodeUnsupported)
		wantCode(t, "EnsureWarden without a warden", v.e.EnsureWarden(ctx, sb), spec.CodeUnsupported)
		return
	}
	if err := v.e.EnsureWarden(ctx, sb); err != nil {
		t.Fatalf("EnsureWarden: %v", err)
	}
	secret := bytes.Repeat([]byte{0x42}, wire.SecretSize)
	open := func(what string, conn dockerio.WardenConn, reattach bool) (*link.Link, wire.Hello) {
		t.Helper()
		l, h, err := link.Open(ctx, conn.R, conn.W, conn.C, link.Handshake{Secret: secret, Reattach: reattach})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l, h
	}
	conn, err := v.e.StartWarden(ctx, sb, io.Discard)
	if err != nil {
		t.Fatalf("StartWarden: %v", err)
	}
	first, h := open("the first link", conn, false)
	if h.PID <= 0 || !strings.HasPrefix(h.Socket, dockerio.TmpDir+"/") {
		t.Fatalf("hello %+v: want a pid and a socket under %s", h, dockerio.TmpDir)
	}
	p, err := first.Spawn(ctx, wire.Spawn{ID: "p1", Argv: []string{"true"}})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	for {
		if _, _, err := p.Next(); err != nil {
			break
		}
	}
	select {
	case <-p.Exited():
	case <-ctx.Done():
		t.Fatal("no exit from the warden")
	}
	if x, ok := p.Exit(); !ok || x.Code != 0 {
		t.Fatalf("exit %+v %v, want 0", x, ok)
	}
	_ = first.Close()

	again, err := v.e.AttachWarden(ctx, sb, h.Socket, io.Discard)
	if err != nil {
		t.Fatalf("AttachWarden: %v", err)
	}
	if _, h2 := open("the reattach", again, true); h2.PID != h.PID {
		t.Fatalf("reattach reached warden %d, want %d", h2.PID, h.PID)
	}
	if err := v.e.RetireWarden(ctx, sb, h.PID, h.Socket); err != nil {
		t.Fatalf("RetireWarden: %v", err)
	}
	gone, err := v.e.AttachWarden(ctx, sb, h.Socket, io.Discard)
	if err == nil {
		if _, _, err = link.Open(ctx, gone.R, gone.W, gone.C, link.Handshake{Secret: secret, Reattach: true}); err == nil {
			t.Fatal("a reattach to a retired warden passed")
		}
		_ = gone.C.Close()
	}
}

// RunWardens runs the warden subtest alone against engines made by mk
// (an engine that delivers a warden: Run's engines may have none).
func RunWardens(t *testing.T, mk func(t *testing.T) Target) {
	t.Run("Wardens", func(t *testing.T) {
		tg := mk(t)
		testWardens(t, env{Target: tg, e: tg.Engine})
	})
}
