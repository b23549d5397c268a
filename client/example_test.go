package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// A process in a kept sandbox of a running `stockade serve`. The examples
// here have no Output line: they need a server, so go test compiles them
// but does not run them.
func ExampleDial() {
	ctx := context.Background()
	c, err := client.Dial("") // $STOCKADE_SOCKET, else the default journal's server
	if err != nil {
		log.Fatal(err) // cancelled, naming the path: no server answers there
	}
	// A connection: closing it loses nothing. The sandbox below stays up:
	// it is kept.
	defer func() { _ = c.Close() }()

	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: "stockade/toolbox:dev", Lifetime: spec.Kept})
	if err != nil {
		log.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo out; echo err >&2"}})
	if err != nil {
		log.Fatal(err)
	}
	// Stdout and stderr share one gRPC stream: read both. Wait says how
	// the process ended.
	go func() { _, _ = io.Copy(os.Stderr, p.Stderr()) }()
	if _, err := io.Copy(os.Stdout, p.Stdout()); err != nil {
		log.Fatal(err)
	}
	res, err := p.Wait(ctx)
	var se *spec.Error
	if errors.As(err, &se) {
		log.Fatalf("%s: %v", se.Code, err) // the server's code crosses the wire
	}
	fmt.Println(sb.ID(), res.ExitCode)
}

// Waiting for a process by id, such as one started with `stockade exec -d`
// or re-adopted after a server restart, and reading its recorded output.
func ExampleClient_Wait() {
	ctx := context.Background()
	c, err := client.Dial("")
	if err != nil {
		log.Fatal(err)
	}
	// A connection: closing it loses nothing.
	defer func() { _ = c.Close() }()
	id := os.Args[1] // a process id
	res, err := c.Wait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Logs(ctx, id, func(ch host.OutputChunk) error {
		_, err := os.Stdout.Write(ch.Data)
		return err
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", res.ExitCode, res.Reason)
}
