package host_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// echo runs one command in a one-shot sandbox of rt and prints its output
// and result. It is written once against host.Runtime and works the same on
// an embedded runtime and on a server's client.
func echo(ctx context.Context, rt host.Runtime) (err error) {
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: "stockade/toolbox:dev"})
	if err != nil {
		return err
	}
	// A sandbox left behind is worth knowing about.
	defer func() { err = errors.Join(err, sb.Remove(ctx)) }()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"echo", "hi"}, Stderr: spec.Discard})
	if err != nil {
		return err
	}
	if _, err := io.Copy(os.Stdout, p.Stdout()); err != nil { // a piped stream must be read
		return err
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	fmt.Println("exit", res.ExitCode, res.Reason)
	return nil
}

// Switching between an embedded runtime and a server is one line: both are
// a host.Runtime. (No Output line: it needs a Docker engine, so it is
// compiled, not run, by go test.)
func Example() {
	ctx := context.Background()
	embedded, err := stockade.Open(ctx, stockade.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		// Close closes the journal: its error is worth knowing.
		if err := embedded.Close(); err != nil {
			log.Print(err)
		}
	}()

	var rt host.Runtime = embedded.Host() //nolint:staticcheck // ST1023: the type is the example's point, a client is one too
	// or, through `stockade serve` on the same journal:
	//	rt, err := client.Dial("") // the default journal's server
	if err := echo(ctx, rt); err != nil {
		log.Fatal(err)
	}
}

// A Go host that prefers a running server and falls back to an embedded
// runtime when none answers (Dial fails at once then).
func Example_fallback() {
	ctx := context.Background()
	// The default journal's server if one answers ($STOCKADE_SOCKET, else
	// beside $STOCKADE_JOURNAL or the default journal), else the same
	// journal embedded: never a second runtime on a served journal.
	var rt host.Runtime
	if c, err := client.Dial(""); err == nil {
		rt = c
	} else {
		embedded, err := stockade.Open(ctx, stockade.Options{})
		if err != nil {
			log.Fatal(err)
		}
		rt = embedded.Host()
	}
	defer func() {
		// An embedded runtime's Close closes its journal: its error is
		// worth knowing.
		if err := rt.Close(); err != nil {
			log.Print(err)
		}
	}()
	if err := echo(ctx, rt); err != nil {
		log.Fatal(err)
	}
}

// reattach is the crash recipe: a host that died (kill -9, anything) left
// its process running; the next host finds it by id in the journal,
// embedded or served alike, and attaches from the offset the dead host had
// reached: the recorded bytes, then the live ones, every byte once, stdout
// and stderr in the order they were written, then the exit.
func reattach(ctx context.Context, rt host.Runtime, id string, from int64) error {
	p, err := rt.Process(ctx, id) // any journaled process, running or ended
	if err != nil {
		return err
	}
	end, err := p.Attach(ctx, host.AttachOptions{From: from}, func(c host.OutputChunk) error {
		_, err := os.Stdout.Write(c.Data)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Println("exit", end.Result.ExitCode, end.Result.Reason, "complete", end.Output.Complete)
	return nil
}

// Example_reattach finds the process whose id an earlier host kept (here
// in $PROCESS), after that host is gone, and attaches from the start.
func Example_reattach() {
	ctx := context.Background()
	rt, err := client.Dial("")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = rt.Close() }() // a client's connection: nothing to lose
	if err := reattach(ctx, rt, os.Getenv("PROCESS"), 0); err != nil {
		log.Fatal(err)
	}
}

// Files: a file written where no directory was yet, read back.
func Example_files() {
	ctx := context.Background()
	rt, err := client.Dial("")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = rt.Close() }() // a client's connection: nothing to lose
	sb, err := rt.Sandbox(ctx, os.Getenv("SANDBOX"))
	if err != nil {
		log.Fatal(err)
	}
	fs := sb.Files()
	if err := fs.WriteFile(ctx, "work/notes/today.txt", []byte("hello\n"), 0o644); err != nil { // notes/ is made
		log.Fatal(err)
	}
	r, info, err := fs.Read(ctx, "/workspace/work/notes/today.txt") // the same file: relative or absolute under /workspace
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = r.Close() }() // only read
	if _, err := io.Copy(os.Stdout, r); err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Size, "bytes")
}
