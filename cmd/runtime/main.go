// Command stockade is the CLI of the stockade runtime. Each command is an
// embedded runtime holding the journal lock; a second command while one holds
// it fails fast with a journal_locked error naming the holder.
//
//	stockade doctor                     check the daemon against the profile
//	stockade run [flags] -- CMD...      one-shot sandbox: create, run, stream, remove
//	stockade journal show SANDBOX       a sandbox's journaled history
//	stockade journal export             the whole journal as JSON lines
//	stockade journal ls                 live entities in the journal
//	stockade journal replay ID --at N   a stream's state at a sequence
//	stockade journal verify             check the whole journal
//	stockade recover [--dry-run]        run or plan the crash recovery
//	stockade drill                      crash drills over every failpoint
//
// Exit codes: run exits with the command's code; 125 when stockade itself
// failed, 126/127 when the command could not be started (as docker run);
// other commands exit 0 on success, 1 on failure, 2 on bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/stockade/stockade/spec"
)

const usage = `usage: stockade <command> [flags]

commands:
  doctor                    check the Docker daemon against the profile
  run [flags] -- CMD...     run CMD in a one-shot sandbox and remove it
  journal show SANDBOX      print a sandbox's journaled history
  journal export            print the whole journal as JSON lines
  journal ls                list the journal's live entities
  journal replay ID [--process] [--at SEQ]
                            fold a stream up to a sequence and print the state there
  journal verify            check every record, stream and index of the journal
  recover [--dry-run]       run (or only plan) the crash recovery and print each decision
  drill [--failpoints a,b] [--random N]
                            crash drills: kill a child runtime at each failpoint, recover, check invariants

global flags (before or after the command):
  --journal PATH            journal file (default $STOCKADE_JOURNAL, else $XDG_STATE_HOME/stockade/journal.db)
  --profile NAME            preflight profile (default $STOCKADE_PROFILE, else linux-x64)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "doctor":
		return doctor(ctx, args[1:], stdout, stderr)
	case "run":
		return run(ctx, args[1:], stdin, stdout, stderr)
	case "journal":
		return journalCmd(ctx, args[1:], stdout, stderr)
	case "recover":
		return recoverCmd(ctx, args[1:], stdout, stderr)
	case "drill":
		return drill(ctx, args[1:], stdout, stderr)
	case "drill-child": // the workload a drill kills; not for people
		return drillChild(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "stockade: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// global holds the flags every command takes.
type global struct {
	journal string
	profile string
	json    bool
}

func (g *global) register(fs *flag.FlagSet) {
	fs.StringVar(&g.journal, "journal", "", "journal file")
	fs.StringVar(&g.profile, "profile", "", "preflight profile")
	fs.BoolVar(&g.json, "json", false, "JSON output for scripts")
}

// fail prints err with its code and returns the exit code.
func fail(stderr io.Writer, err error, code int) int {
	fmt.Fprintf(stderr, "stockade: %v\n", err)
	if c := spec.CodeOf(err); c != "" {
		fmt.Fprintf(stderr, "stockade: error code %s\n", c)
	}
	return code
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
