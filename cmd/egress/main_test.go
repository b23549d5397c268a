package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

// The proxy runs in a container built from nothing but itself: its
// dependencies are the standard library and stockade's egress and spec
// packages (which use the standard library only).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/stockade/stockade/cmd/egress",
			"github.com/stockade/stockade/egress",
			"github.com/stockade/stockade/spec":
		default:
			t.Errorf("dependency %s is outside std and stockade's egress and spec", dep)
		}
	}
}

// TestBinary builds stockade-egress as it ships (static, no cgo) and runs
// serve and the control bridge as subprocesses, end to end.
func TestBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "stockade-egress")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary needs a dynamic loader")
		}
	}
	_ = f.Close()

	t.Run("subcommands", func(t *testing.T) {
		if out, err := exec.Command(bin, "version").Output(); err != nil || string(out) != egress.ProtocolVersion+"\n" {
			t.Errorf("version: %q, %v", out, err)
		}
		for _, args := range [][]string{{}, {"bogus"}, {"control"}, {"version", "x"}, {"serve"},
			{"serve", "--listen", "127.0.0.1:0"}, {"serve", "--listen", "127.0.0.1:0", "--control", "/nonexistent/x", "--rules", "bad rule"},
			{"serve", "--listen", "127.0.0.1:0", "--control", "/nonexistent/x", "extra"}} {
			cmd := exec.Command(bin, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("%v: %v, stderr %q; want exit 2", args, err, stderr.String())
			}
		}
	})

	t.Run("serve and control", func(t *testing.T) {
		echo := echoServer(t)
		sockDir, err := os.MkdirTemp("", "egress")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.RemoveAll(sockDir) }()
		sock := filepath.Join(sockDir, "run", "egress.sock")

		serve := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--control", sock,
			"--rules", hostPort(echo), "--rules-version", "3")
		stderr, err := serve.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = serve.Process.Kill() }()
		// The first line says where it listens, once both sockets are up.
		logs := bufio.NewScanner(stderr)
		if !logs.Scan() {
			t.Fatalf("serve said nothing: %v", logs.Err())
		}
		first := logs.Text()
		addr, _, ok := strings.Cut(strings.TrimPrefix(first, "stockade-egress: serving on "), ",")
		if !ok || !strings.Contains(first, "rules version 3 (1 rules)") {
			t.Fatalf("serve's first line: %q", first)
		}
		h := &harness{t: t, addr: addr}

		bridge := exec.Command(bin, "control", sock)
		stdin, _ := bridge.StdinPipe()
		stdout, _ := bridge.StdoutPipe()
		if err := bridge.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = bridge.Process.Kill() }()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		c, err := egress.Open(ctx, stdout, stdin, stdin)
		if err != nil {
			t.Fatal(err)
		}
		if hello := c.Hello(); hello.RulesVersion != 3 || hello.Next != 1 {
			t.Errorf("hello %+v", hello)
		}
		if err := c.Resume(0); err != nil {
			t.Fatal(err)
		}

		tunnel, br, resp := h.connect(hostPort(echo), basicAuth("p9", ""))
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		if _, err := io.WriteString(tunnel, "through"); err != nil {
			t.Fatal(err)
		}
		if err := tunnel.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(br); string(got) != "through" {
			t.Fatalf("echo %q", got)
		}
		_ = tunnel.Close()
		if d := next(t, c); d.Seq != 1 || d.Verdict != "allow" || d.Process != "p9" || d.Up != 7 || d.Down != 7 {
			t.Errorf("decision %+v", d)
		}

		rs, _ := spec.ParseEgressRules("example.com:443")
		if err := c.Apply(ctx, 4, rs, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, resp := h.connect(hostPort(echo), ""); resp.StatusCode != 403 {
			t.Fatalf("CONNECT after the change: %s", resp.Status)
		}
		if d := next(t, c); d.Seq != 2 || d.Verdict != "deny" {
			t.Errorf("decision %+v", d)
		}

		// The runtime's end closes the bridge's stdin: the bridge ends.
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := bridge.Wait(); err != nil {
			t.Errorf("bridge: %v", err)
		}
		// SIGTERM stops the proxy cleanly, with one more line.
		if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		var rest []string
		for logs.Scan() {
			rest = append(rest, logs.Text())
		}
		if err := serve.Wait(); err != nil {
			t.Errorf("serve after SIGTERM: %v", err)
		}
		if len(rest) != 1 || rest[0] != "stockade-egress: stopped" {
			t.Errorf("serve's later lines: %q", rest)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("the control socket outlives the proxy: %v", err)
		}
	})
}
