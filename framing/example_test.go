package framing_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

func ExampleDecoder() {
	var conn bytes.Buffer // stands in for the attach stream
	enc := framing.NewEncoder(&conn)
	_ = enc.WriteFrame(framing.Stdout, []byte("building...\n"))
	_ = enc.WriteFrame(framing.Stderr, []byte("warning: unused variable\n"))
	_ = enc.WriteFrame(framing.Stdout, []byte("done\n"))

	dec := framing.NewDecoder(&conn, framing.Options{})
	for {
		id, p, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%s: %q\n", id, p) // p is valid until the next call
	}
	// Output:
	// stdout: "building...\n"
	// stderr: "warning: unused variable\n"
	// stdout: "done\n"
}

func ExampleCopy() {
	var conn bytes.Buffer
	enc := framing.NewEncoder(&conn)
	_ = enc.WriteFrame(framing.Stdout, []byte("hello\n"))
	_ = enc.WriteFrame(framing.Stderr, []byte("oops\n"))
	conn.Write([]byte{1, 0, 0, 0, 0, 0, 0, 9, 'c', 'u', 't'}) // the stream breaks mid-frame

	var stdout, stderr bytes.Buffer
	n, err := framing.Copy(&stdout, &stderr, &conn)
	fmt.Printf("%d bytes written: stdout %q, stderr %q\n", n, stdout.String(), stderr.String())
	fmt.Println(spec.CodeOf(err), errors.Is(err, io.ErrUnexpectedEOF))
	// Output:
	// 14 bytes written: stdout "hello\ncut", stderr "oops\n"
	// stream_failure true
}

func ExampleDaemonError() {
	var conn bytes.Buffer
	enc := framing.NewEncoder(&conn)
	_ = enc.WriteFrame(framing.Systemerr, []byte("container abc is not running\n"))

	_, _, err := framing.NewDecoder(&conn, framing.Options{}).Next()
	var de *framing.DaemonError
	if errors.As(err, &de) {
		fmt.Printf("daemon said %q\n", de.Message)
	}
	fmt.Println(err)
	// Output:
	// daemon said "container abc is not running\n"
	// framing: stream_failure: daemon error frame at offset 0: docker daemon error: container abc is not running
}

func ExampleOptions() {
	var conn bytes.Buffer
	conn.Write([]byte{2, 0, 0, 0, 0, 0x10, 0, 0}) // a header declaring 1 MiB of stderr

	_, _, err := framing.NewDecoder(&conn, framing.Options{FrameLimit: 64 << 10}).Next()
	fmt.Println(errors.Is(err, spec.ErrOutputLimit))
	fmt.Println(err)
	// Output:
	// true
	// framing: output_limit: stderr frame at offset 0 declares 1048576 bytes, over the frame limit of 65536
}
