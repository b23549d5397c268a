package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/warden"
)

// TestDocker runs the warden where it ships: in a container of the image
// named by STOCKADE_WARDEN_DOCKER_IMAGE (busybox is enough), as an
// unprivileged uid, under `docker exec -i`; it loses the link by closing the
// exec's stdin and reattaches through a second exec of `attach`. Skipped
// without the variable (the other tests need no Docker).
func TestDocker(t *testing.T) {
	image := os.Getenv("STOCKADE_WARDEN_DOCKER_IMAGE")
	if image == "" {
		t.Skip("STOCKADE_WARDEN_DOCKER_IMAGE is not set")
	}
	if os.Getenv("STOCKADE_WARDEN_TEST_RACE") == "1" {
		t.Skip("the race build needs libc")
	}
	out, err := exec.Command("docker", "run", "-d", "--rm", "--user", "1000:1000", "--read-only", "--tmpfs", "/tmp",
		"-v", filepath.Dir(wardenBin)+":/warden:ro", image, "sleep", "100000").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })

	w := &wardenProc{t: t, secret: bytes.Repeat([]byte{7}, warden.SecretSize)}
	w.sub = startCmd(t, exec.Command("docker", "exec", "-i", id, "/warden/stockade-warden", "serve"))
	c := w.link(warden.Init{Window: 64 << 10})
	if !strings.HasPrefix(c.first.Socket, "/tmp/.stockade-warden-") {
		t.Errorf("hello %+v", c.first)
	}
	c.spawn(1, warden.Spawn{Argv: []string{"id", "-u"}})
	c.spawn(2, warden.Spawn{Argv: []string{"sh", "-c", "stty size"}, TTY: true, Rows: 33, Cols: 77})
	if x, s := c.waitExited(1); x.Code != 0 || string(s.out) != "1000\n" || x.OOMKills < -1 {
		t.Errorf("id -u: %+v %q", x, s.out)
	}
	if x, s := c.waitExited(2); x.Code != 0 || !bytes.Contains(s.out, []byte("33 77")) {
		t.Errorf("stty size: %+v %q", x, s.out)
	}
	c.setNoAck(3, true)
	c.spawn(3, warden.Spawn{Argv: []string{"sh", "-c", "seq 1 50000; exec sleep 100000"}})
	c.waitFor("a full window", func() bool { return c.ch(3).received() == 64<<10 })

	// The runtime goes away: Docker gives the warden's stdin its end. (The
	// exec's output stream stays open: Docker ends it when the warden
	// exits, not when the warden closes its stdout.)
	w.stdin.Close()

	b := startCmd(t, exec.Command("docker", "exec", "-i", id, "/warden/stockade-warden", "attach", c.first.Socket))
	r := newConn(t, b.stdout, b.stdin)
	var chal warden.Challenge
	if err := warden.Decode(warden.Frame{Type: warden.TChallenge, Payload: r.waitControl(warden.TChallenge)}, &chal); err != nil {
		t.Fatal(err)
	}
	nonce, _ := hex.DecodeString(chal.Nonce)
	if err := r.w.WriteJSON(warden.TAuth, 0, &warden.Auth{MAC: hex.EncodeToString(warden.MAC(w.secret, nonce))}); err != nil {
		t.Fatal(err)
	}
	r.waitHello()
	if e := entryOf(r.list(), 3); e == nil || !e.Running || e.Output != 64<<10 {
		t.Fatalf("entry after reattach: %+v", e)
	}
	if err := r.w.WriteOffset(warden.TResume, 3, 0); err != nil {
		t.Fatal(err)
	}
	want := seqOutput(50000)
	r.waitFor("all of seq's output", func() bool { return r.ch(3).received() == uint64(len(want)) })
	r.mu.Lock()
	got := append([]byte(nil), r.ch(3).out...)
	r.mu.Unlock()
	if !bytes.Equal(got, want) {
		t.Error("output after the reattach differs from seq's")
	}
	if err := r.w.WriteSignal(3, 9); err != nil {
		t.Fatal(err)
	}
	if x, _ := r.waitExited(3); x.Signal != 9 {
		t.Errorf("exited %+v", x)
	}
}

func startCmd(t *testing.T, cmd *exec.Cmd) *sub {
	t.Helper()
	s := &sub{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = s.stderr
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if s.stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%v stderr:\n%s", cmd.Args, s.stderr.String())
		}
	})
	return s
}
