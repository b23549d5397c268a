// Command stockade is the CLI of the stockade runtime. A command goes through
// `stockade serve` when the journal's socket answers; without a server it is
// an embedded runtime holding the journal lock for its duration (a second
// one meanwhile fails fast with a journal_locked error naming the holder).
//
//	stockade doctor                     check the daemon against the profile
//	stockade run [flags] -- CMD...      one-shot sandbox: create, run, stream, remove
//	stockade sandbox create|ls|inspect|stop|rm   kept sandboxes
//	stockade exec [-i] [-t] [-d] ID -- CMD...   run CMD in a kept sandbox
//	stockade cp SRC DST                 copy files in or out (ID:PATH under /workspace)
//	stockade serve [--socket PATH]      the runtime as a server (gRPC on a unix socket)
//	stockade pool ls|resize             the server's warm pools (serve --pool)
//	stockade logs [-f] PROCESS_ID       a process's recorded output
//	stockade mcp                        the runtime's tools for an agent, over MCP on stdio
//	stockade diff PROCESS_ID            what a process changed under /workspace
//	stockade replay SANDBOX --rerun     run a recorded session again and compare
//	stockade journal show SANDBOX       a sandbox's journaled history
//	stockade journal tail               every entity's new events (needs serve)
//	stockade journal export             the whole journal as JSON lines
//	stockade journal ls                 live entities in the journal
//	stockade journal replay ID --at N   a stream's state at a sequence
//	stockade journal diff ID --at A --at B   what changed between two points
//	stockade journal verify             check the whole journal
//	stockade journal restore COPY DEST  turn a copy into a writable journal
//	stockade recover [--dry-run]        run or plan the crash recovery
//	stockade drill                      crash drills over every failpoint
//	stockade completion bash|zsh|fish   a shell completion script
//
// The whole command line is parsed and validated before anything opens a
// journal or talks to Docker, so a usage error exits 2 whatever the state of
// the machine.
//
// Exit codes: run and exec exit with the command's code; 125 when stockade itself
// failed, 126/127 when the command could not be started (as docker run);
// other commands exit 0 on success, 1 on failure, 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

const usage = `usage: stockade [global flags] <command> [flags]

commands:
  doctor                    check the Docker daemon against the profile
  run [flags] -- CMD...     run CMD in a one-shot sandbox and remove it (-t: on a terminal)
  sandbox create [policy flags] [--ttl D] [--image I] [--env NAME=value] [--dir D] [--label KEY=value] [--from CHECKPOINT]
                            make a kept sandbox and print its id (--ttl: stopped D after creation;
                            --env, --dir: every process's defaults; --label: the caller's names;
                            --from: start with a checkpoint's workspace)
  sandbox ls [--all] | inspect ID | stop ID | rm [-f] ID
                            list (--all: pooled ones too), show, stop (resources kept), remove
  sandbox network ID allow=RULE[,RULE...]
                            replace a running allowlist sandbox's egress rules
  exec [-i] [-t] [-d] [-e NAME=value] [--workdir D] [--timeout D] [--no-changes] ID -- CMD...
                            run CMD in a kept sandbox; exits with its code
                            (-t: on a terminal; -d: detached, prints its process id;
                            --no-changes: what it changes under /workspace is not tracked)
  cp SRC DST                copy a file or directory into or out of a sandbox: one side is
                            ID:PATH, PATH under /workspace (e.g. ID:work/out.txt or ID:/workspace/work/out.txt)
  serve [--socket PATH] [--pool NAME=KEY=VALUE,...,size=N]
                            serve the runtime's API on a unix socket (default: the journal's path with .sock),
                            keeping warm pools of sandboxes made ahead of demand
  pool ls | resize NAME N   list a server's warm pools, or set one's size
  checkpoint SANDBOX [NAME] capture a sandbox's /workspace/work (frozen) into the checkpoint store; prints its id
  checkpoint ls [SANDBOX] | rm CHECKPOINT
                            list the store's checkpoints (a sandbox's, or all), or remove one
  rollback SANDBOX CHECKPOINT
                            restore a checkpoint into the sandbox's workspace (its processes stopped first)
  logs [--stdout|--stderr] [-f] PROCESS_ID
                            print a process's recorded output (stdout and stderr in arrival order;
                            -f: follow a running one, needs stockade serve)
  mcp                       serve the runtime to an agent over MCP on stdin/stdout (docs/mcp.md)
  diff PROCESS_ID           what a process changed under /workspace: its changes, and a unified diff
                            of each small text file
  usage [SANDBOX] [--label KEY=value] [--since T]
                            what sandboxes used (CPU, memory, GiB·s, processes, output, egress),
                            from the journal; with SANDBOX, each process's rusage too
  replay SANDBOX --rerun [--until POS] [--keep] [--timeout D]
                            run a sandbox's recorded processes again in a new sandbox and compare each
                            (exit, stdout, stderr, changes); exits 0 whether or not they diverged
  journal show SANDBOX [--output] [--changes] [--follow] [--type T]
                            print a sandbox's journaled history (--output: each process's output under its exit;
                            --changes: each process's changes under its exit;
                            --follow: then new events live, needs stockade serve; --type T: types starting with T)
  journal export            print the whole journal as JSON lines
  journal ls                list the journal's live entities
  journal replay ID [--process] [--at SEQ]
                            fold a stream up to a sequence and print the state there
  journal tail              every entity's new events as they happen (needs stockade serve)
  journal diff ID [--process] --at A --at B
                            what changed in the folded state between two sequences
  journal verify            check every record, stream and index of the journal
  journal restore COPY DEST make a journal copy (CopyTo) writable again as a new file DEST
  recover [--dry-run] [--stop-processes]
                            run (or only plan) the crash recovery and print each decision
  drill [--failpoints a,b] [--random N]
                            crash drills: kill a child runtime at each failpoint, recover, check invariants
  completion bash|zsh|fish  print a shell completion script
  help [COMMAND]            this text, or a command's with examples (also COMMAND --help)

global flags (before or after the command):
  --journal PATH            journal file (default $STOCKADE_JOURNAL, else $XDG_STATE_HOME/stockade/journal.db)
  --profile NAME            preflight profile (default $STOCKADE_PROFILE, else linux-x64)
  --json                    JSON output for scripts
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	// A command's spans: a collector that does not answer holds its exit
	// up two seconds at most.
	flushTraces(cliTraces, 2*time.Second, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	os.Exit(code)
}

// command is a parsed, validated command line, ready to execute.
type command interface {
	execute(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, err := parse(args)
	var help helpRequest
	switch {
	case errors.As(err, &help):
		if text, ok := commandHelp[help.cmd]; ok {
			return printText(stdout, stderr, text)
		}
		return printText(stdout, stderr, usage)
	case errors.Is(err, flag.ErrHelp):
		return printText(stdout, stderr, usage)
	case err != nil:
		return fail(stderr, fmt.Errorf("%w (see stockade help)", err), 2)
	}
	return cmd.execute(ctx, stdin, stdout, stderr)
}

// parse turns a command line into a command, or into an invalid_argument
// error (flag.ErrHelp for a request for help). It touches nothing.
func parse(args []string) (command, error) {
	if env := os.Getenv(profile.Env); env != "" {
		if _, err := profile.Lookup(env); err != nil {
			return nil, spec.Wrap(spec.CodeInvalidArgument, "usage", err, "$%s", profile.Env)
		}
	}
	var g global
	fs := newFlags("usage", &g)
	if err := fs.Parse(args); err != nil {
		return nil, usageError("usage", err)
	}
	if fs.NArg() == 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "usage", "no command given")
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	cmd, err := parseCommand(g, name, rest)
	if errors.Is(err, flag.ErrHelp) && name != "help" {
		return nil, helpRequest{name}
	}
	return cmd, err
}

func parseCommand(g global, name string, rest []string) (command, error) {
	switch name {
	case "doctor":
		return parseDoctor(g, rest)
	case "run":
		return parseRun(g, rest)
	case "sandbox":
		return parseSandbox(g, rest)
	case "exec":
		return parseExec(g, rest)
	case "cp":
		return parseCp(g, rest)
	case "serve":
		return parseServe(g, rest)
	case "node":
		return parseNode(g, rest)
	case "pool":
		return parsePool(g, rest)
	case "checkpoint":
		return parseCheckpoint(g, rest)
	case "rollback":
		return parseRollback(g, rest)
	case "journal":
		return parseJournal(g, rest)
	case "logs":
		return parseLogs(g, rest)
	case "mcp":
		return parseMCP(g, rest)
	case "diff":
		return parseDiffCmd(g, rest)
	case "usage":
		return parseUsage(g, rest)
	case "replay":
		return parseReplay(g, rest)
	case "recover":
		return parseRecover(g, rest)
	case "drill":
		return parseDrill(g, rest)
	case "drill-child": // the workload a drill kills; not for people
		return parseDrillChild(g, rest)
	case "completion":
		return parseCompletion(g, rest)
	case "help":
		if len(rest) == 1 {
			if _, ok := commandHelp[rest[0]]; ok {
				return nil, helpRequest{rest[0]}
			}
			if rest[0] == "-h" || rest[0] == "--help" {
				return nil, helpRequest{"help"}
			}
		}
		return nil, flag.ErrHelp
	}
	return nil, spec.Errorf(spec.CodeInvalidArgument, "usage", "unknown command %q", name)
}

// global holds the flags every command takes.
type global struct {
	journal string
	profile string
	json    bool
}

// newFlags returns a flag set for one command with the global flags in it,
// their defaults being what was parsed before the command name. The flag
// package's own messages are dropped: parse reports its errors as
// invalid_argument.
func newFlags(name string, g *global) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&g.journal, "journal", g.journal, "journal file")
	fs.Func("profile", "preflight profile", func(v string) error {
		if _, err := profile.Lookup(v); err != nil {
			return err
		}
		g.profile = v
		return nil
	})
	fs.BoolVar(&g.json, "json", g.json, "JSON output for scripts")
	return fs
}

// parseArgs parses fs's flags wherever they stand among the positional
// arguments (stockade journal show ID --json) and returns the positional
// ones; everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError(fs.Name(), err)
		}
		if used := len(args) - fs.NArg(); used > 0 && args[used-1] == "--" {
			return append(pos, fs.Args()...), nil
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// clusters spells out clustered one-letter boolean flags (-it is -i -t,
// as in docker) among the flags before the first argument that is not one,
// where fs would parse them; a cluster with any letter that is not a
// one-letter boolean flag of fs is left as it is (and refused by fs).
func clusters(fs *flag.FlagSet, args []string) []string {
	isBool := func(name string) bool {
		f := fs.Lookup(name)
		if f == nil {
			return false
		}
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return ok && b.IsBoolFlag()
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		if n, _, eq := strings.Cut(name, "="); !eq && fs.Lookup(n) != nil && !isBool(n) && i+1 < len(args) {
			out = append(out, a, args[i+1]) // a flag and its value
			i++
			continue
		}
		all := len(name) > 1 && a[1] != '-'
		for _, r := range name {
			all = all && r < 0x80 && fs.Lookup(string(r)) != nil && isBool(string(r))
		}
		if !all || fs.Lookup(name) != nil {
			out = append(out, a)
			continue
		}
		for _, r := range name {
			out = append(out, "-"+string(r))
		}
	}
	return out
}

// wantArgs checks the number of positional arguments against the command's
// usage line.
func wantArgs(name string, pos []string, n int, usage string) error {
	if len(pos) == n {
		return nil
	}
	what := "missing arguments"
	if len(pos) > n {
		what = fmt.Sprintf("unexpected arguments %q", pos[n:])
	}
	return spec.Errorf(spec.CodeInvalidArgument, name, "%s (usage: %s)", what, usage)
}

func usageError(name string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return spec.Wrap(spec.CodeInvalidArgument, name, err, "")
}

// fail prints err with its code and returns the exit code.
// The message is one line; a typed error's text carries its code.
func fail(stderr io.Writer, err error, code int) int {
	note(stderr, "%s", termSafe(strings.ReplaceAll(err.Error(), "\n", " ")))
	return code
}

// note prints a one-line message on stderr; what a sandbox controls in it
// is the caller's to escape (termSafe). A failing stderr is not reported:
// there is nowhere left to report it.
func note(stderr io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(stderr, "stockade: "+format+"\n", args...)
}
