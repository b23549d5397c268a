package enginetest

import (
	"strconv"
	"strings"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
)

// Commands is a dockerio.Fake Script that models the commands the suite
// runs, as the sandbox image runs them: true, echo, cat (stdin to stdout),
// sleep (until signalled), /bin/sh -c "exit N", and, for any other name, a
// missing binary (the exec wrapper's shell says "not found", exit 127).
func Commands(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
	argv := req.Spec.Argv
	switch argv[0] {
	case "true":
		return dockerio.FakeRun{}
	case "echo":
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte(strings.Join(argv[1:], " ") + "\n")}}}
	case "cat":
		return dockerio.FakeRun{EchoStdin: true}
	case "sleep":
		return dockerio.FakeRun{Hold: make(chan struct{})}
	case "/bin/sh", "sh":
		if len(argv) == 3 && argv[1] == "-c" {
			if n, err := strconv.Atoi(strings.TrimPrefix(argv[2], "exit ")); err == nil && strings.HasPrefix(argv[2], "exit ") {
				return dockerio.FakeRun{ExitCode: n}
			}
		}
		return dockerio.FakeRun{ExitCode: 2, Frames: []dockerio.FakeFrame{{Stream: framing.Stderr, Data: []byte("enginetest: this shell script is not modelled\n")}}}
	}
	return dockerio.FakeRun{ExitCode: 127, Frames: []dockerio.FakeFrame{{Stream: framing.Stderr, Data: []byte("stockade-exec: 1: exec: " + argv[0] + ": not found\n")}}}
}
