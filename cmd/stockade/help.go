package main

import (
	"context"
	"io"
	"sort"
	"strings"

	"github.com/stockade/stockade/spec"
)

// helpRequest is parse's answer to -h, --help or `stockade help CMD`.
type helpRequest struct{ cmd string }

func (h helpRequest) Error() string { return "help requested for " + h.cmd }

// commandHelp is each command's help: what it does, its flags, examples.
var commandHelp = map[string]string{
	"mcp": `usage: stockade mcp

Serves the runtime to an agent over the Model Context Protocol on stdin and
stdout (what an agent's MCP client spawns): tools to make sandboxes, run
commands (exec, exec_background, logs from any offset, wait), move files,
read what a command changed, checkpoint and roll back (docs/mcp.md). It uses
the journal's server when one answers, else an embedded runtime for the
session's duration. Logs go to stderr. An agent's configuration:

    {"mcpServers": {"stockade": {"command": "stockade", "args": ["mcp"]}}}

  stockade mcp
  stockade --journal /srv/agents/journal.db mcp
`,
	"doctor": `usage: stockade doctor [--profile NAME]

Checks the Docker daemon against the preflight profile and prints every check,
the value observed, and each guarantee the profile relaxes; then the warden
binary every sandbox gets and the egress proxy allowlist sandboxes get (named
by $STOCKADE_WARDEN / $STOCKADE_EGRESS, else the ones embedded in stockade):
where each comes from, its version, size and sha256, and where it is installed.

  stockade doctor --profile linux-x64-engine20-cgroupv1
`,
	"run": `usage: stockade run [flags] -- CMD...

Runs CMD in a one-shot sandbox, streams its output, exits with its code and
removes the sandbox (125: stockade failed; 126/127: CMD could not start).

  --image I            image tag or sha256 ID (default stockade/toolbox:dev)
  --cpus N --memory M --pids N --network isolated|open|allow=RULES --user uid:gid
                       the policy (0 or unset: the default); see NETWORK below
  -i                   pass stdin to CMD
  -t, --tty            run CMD on a terminal (see TERMINALS below); -it: both
  -e NAME=value        add to CMD's environment (repeatable)
  --workdir D          working directory (default /workspace/work)
  --timeout D          stop CMD after D
  --history            print the sandbox's journaled history afterwards
  --label KEY=value    the caller's name for the sandbox (repeatable), listed
                       by sandbox ls --json while it runs and journaled
` + ttyHelp + `
  stockade run -- sh -c 'id; ls /workspace'
  echo hi | stockade run -i --memory 256m -- cat
  stockade run -it -- sh
  stockade run --network allow=pypi.org:443,*.pythonhosted.org:443 -- pip download requests
` + networkHelp,
	"sandbox": `usage: stockade sandbox create|ls|inspect|stop|rm|network

  create [policy flags] [--ttl D] [--image I] [--env NAME=value] [--dir D] [--label KEY=value]
                                      make a kept sandbox; prints only its id
                                      (--ttl D: stop it D after creation; needs
                                      stockade serve to enforce it; --env, --dir:
                                      every process's environment and working
                                      directory, a process's own -e and --workdir
                                      win; --label: the caller's names for it,
                                      repeatable). With a server whose warm pool
                                      matches the image and policy, the sandbox
                                      is a pooled one, claimed: no cold start
  ls [--all] [--json]                 list the journal's live sandboxes (--all:
                                      the warm pools' pooled ones too, phase
                                      pooled; POOL says which pool a sandbox
                                      came from; --json: with its labels)
  inspect ID [--json]                 its folded state
  stop ID                             stop it; the workspace stays readable
  rm [-f] ID                          remove it (-f: stop it first)
  network ID allow=RULE[,RULE...]     replace a running allowlist sandbox's
                                      rules (journaled; no restart)

  id=$(stockade sandbox create --memory 1g)
  id=$(stockade sandbox create --ttl 2h)
  id=$(stockade sandbox create --env PYTHONUNBUFFERED=1 --dir /workspace/src --label job=42)
  stockade sandbox ls --all --json
  stockade sandbox inspect --json "$id"
  stockade sandbox rm -f "$id"
  id=$(stockade sandbox create --network allow=example.com:443)
  stockade sandbox network "$id" allow=example.com:443,10.0.0.5:5432
` + networkHelp,
	"exec": `usage: ` + execUsage + `

Runs CMD in a kept sandbox and exits with its code (125: stockade failed;
126/127: CMD could not start).

  -i                   pass stdin to CMD
  -t, --tty            run CMD on a terminal (see TERMINALS below); -it: both
  -d                   start CMD detached and print its process id (needs
                       stockade serve); not with -i or -t, which need this
                       command to stay attached
  -e NAME=value        add to CMD's environment (repeatable)
  --workdir D          working directory (default /workspace/work)
  --timeout D          stop CMD after D
` + ttyHelp + `
  stockade exec "$id" -- python3 -c 'print(1)'
  stockade exec -i -e DEBUG=1 "$id" -- sh
  stockade exec -it "$id" -- bash
`,
	"cp": `usage: ` + cpUsage + `

Copies a file or a directory into or out of a sandbox's /workspace. Into a
path ending in / keeps the source's name; otherwise the last element is the
new name. Out of a sandbox, only files and directories are written.

  stockade cp ./src "$id":work/
  stockade cp "$id":work/report.txt .
`,
	"journal": `usage: stockade journal show|tail|replay|diff|export|ls|verify|restore [--json]

  show SANDBOX [--output] [--changes] [--follow] [--type T] [--egress]
                                           its and its processes' events, with deltas
                                           (--output: recorded output under each exit;
                                           --changes: each process's changes under its exit;
                                           --follow: then new events, live, through a server;
                                           --type T: only events whose type starts with T,
                                           e.g. process or sandbox.exited;
                                           --egress: its egress decisions instead)
  tail                                     every entity's new events, live (needs a server)
  replay ID [--process] [--at SEQ]         the folded state at a sequence
  diff ID [--process] --at A --at B        what changed between two sequences
  export | ls | verify                     JSON lines | live entities | check everything
  restore COPY DEST                        make a journal copy writable, as a new file

  --json (before or after the subcommand): one JSON object a line, with
  stable field names, instead of the human view (show, tail, diff, ls;
  replay and export print JSON either way).

  stockade journal show "$id" --json
  stockade journal show "$id" --type process.exited
  stockade journal diff "$id" --at 3 --at 0
  stockade journal show "$id" --egress --json
`,
	"serve": `usage: ` + serveUsage + `

Runs the runtime (recovery, the actors) as a server: a gRPC API (stockade.v1)
on a unix socket beside the journal (journal.db → journal.sock; --socket or
$STOCKADE_SOCKET), 0600 in a 0700 directory, refusing peers of another uid
(root excepted). SIGTERM/SIGINT: stop accepting, end the calls, close (kept
sandboxes stay up), exit 0. SIGUSR1: print a stats line (goroutines, heap after a GC,
open files) on stderr. Go hosts use the client package. --retain D
deletes removed sandboxes and ended processes (events and recorded output)
D after they end, so a long-lived server stays bounded. --metrics ADDR serves
Prometheus metrics at http://ADDR/metrics (a bare :PORT is on loopback);
--metrics-label KEY (repeatable) labels the stockade_usage_* counters by
that sandbox label besides the pool (keys with few values: a team, a task
kind). --usage-every D is how often each running sandbox's cgroup is
sampled for the usage ledger (stockade usage; default 10s).

TRACES: with OTEL_TRACES_EXPORTER=otlp (or an OTLP endpoint named), the
server exports OpenTelemetry spans of its work (create, readback, process,
stop, remove, rollback, checkpoint, recovery) by OTLP, over
OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf (the default), configured
by the standard OTEL_* variables; OTEL_TRACES_EXPORTER=console prints them
on stderr instead. A client's span (W3C traceparent in gRPC metadata, or
in an MCP request's _meta) parents them; every span is sampled unless
OTEL_TRACES_SAMPLER says otherwise (docs/operations.md).

MCP (--mcp ADDR): the tools of stockade mcp for agents, over MCP's
Streamable HTTP at http://ADDR/ (docs/mcp.md). A bare :PORT is on loopback.
Every request carries "Authorization: Bearer TOKEN": the token in
--mcp-token FILE (this user's, mode 0600, one line of at least 16
characters), or, without it, a new one serve writes at each start to
JOURNAL.mcp-token (0600). A non-loopback address needs --mcp-token (the
token then travels in clear: put TLS in front, or use an SSH tunnel).

WARM POOLS (--pool, repeatable): each keeps size=N sandboxes made, verified
and started ahead of demand. A create (sandbox create, run, a client's)
whose image and policy match a pool's claims one of its sandboxes instead
of making one; its lifetime, --ttl, --env, --dir, --label and allowlist
rules are applied at the claim. An empty pool means a cold create, never a
wait. The keys are sandbox create's flags that fix a sandbox's body:
  image=I              tag or sha256 ID (default stockade/toolbox:dev)
  cpus=N memory=M pids=N user=uid:gid
                       the policy, as --cpus --memory --pids --user
  network=isolated|open|allowlist
                       the network kind (an allowlist's rules are the
                       claimant's: network=allowlist pools for any)
  size=N               how many to keep ready (required; 0 to 1000)
A pool's name is 1 to 32 of a-z, 0-9, - and _. --pool-refills N (default 2)
bounds how many pooled sandboxes are made at once, across every pool.
stockade pool ls shows them; stockade pool resize NAME N sets a size. The
pooled sandboxes are kept: a restarted server takes them back.

  stockade serve --mcp 127.0.0.1:8931 --mcp-token ~/.stockade-mcp-token &
  stockade serve &
  stockade serve --metrics :9464 --metrics-label team &
  OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 stockade serve &
  stockade serve --socket /run/user/1000/stockade.sock
  stockade serve --pool py=image=stockade/python:dev,memory=512m,cpus=1,size=4 &
  stockade serve --pool small=memory=256m,size=2 --pool net=network=allowlist,size=1 &
`,
	"node": `usage: ` + nodeUsage + `

Runs the runtime as a Kubernetes node (virtual-kubelet style): the host
registers as node N with the taint stockade.io/sandbox=true:NoSchedule (only
pods that tolerate it land here) and its capacity (the host's CPUs and memory,
or --cpus and --memory; allocatable less --reserved cpu=N,memory=Q; pods =
--max-pods). It is Ready while its Docker daemon answers and passes the
preflight. It needs a kubelet's credential only (user system:node:N in group
system:nodes, with the Node authorizer and NodeRestriction): no RBAC role.
--pool NAME=KEY=VALUE,...,size=N (repeatable, stockade serve's keys) keeps
sandboxes made ahead: a pod whose image and limits are a pool's key claims
one, and the node's label pool.stockade.io/NAME says how many are ready. Env
from secrets becomes secret variables: never written down. A pod scheduled here becomes a sandbox and its container a
process: command and args, env, workingDir under /workspace, stdin, tty, cpu
and memory limits, the restart policy, activeDeadlineSeconds; anything else
that would change what runs is refused in the pod's status (phase Failed,
reason Unsupported, naming each field). Pod status is read from the journal;
deleting the pod removes the sandbox. kubectl logs (-f, --previous, --tail),
exec (-i, -t, resizes) and attach reach the kubelet API on --listen (TLS;
callers authenticated by client certificate against --client-ca, authorised
by the API server). The node also serves the journal's gRPC socket, so every
other command works while it runs. SIGTERM/SIGINT: the node stops, its
sandboxes keep running; the next start on the same journal re-adopts them,
and removes those whose pods were deleted meanwhile. See docs/kubernetes.md.

  stockade node --kubeconfig node1.kubeconfig --name node1 --listen 127.0.0.1:10250
`,
	"checkpoint": `usage: stockade checkpoint SANDBOX [NAME] | ls [SANDBOX] | rm CHECKPOINT

  SANDBOX [NAME]       capture the sandbox's /workspace/work into the checkpoint
                       store beside the journal (journal.db → journal.checkpoints/)
                       and print its id (ck-…); the workload is frozen for the copy
                       (a pause and unpause journaled around it), the checkpoint is
                       journaled (sandbox.checkpointed) with its env and dir. NAME is
                       optional and unique among the sandbox's checkpoints.
  ls [SANDBOX] [--json] the store's checkpoints: ID NAME SANDBOX CREATED FILES BYTES
  rm CHECKPOINT        remove one (content no other checkpoint shares goes with it)

The store is content-addressed: two checkpoints of a mostly unchanged
workspace share their files. It is bounded (Options.CheckpointBytes); a
checkpoint past the bound fails resource_exhausted and keeps nothing.
Restore one with stockade rollback, or start a new sandbox from one with
stockade sandbox create --from.

  id=$(stockade sandbox create)
  stockade exec "$id" -- sh -c 'echo v1 > notes.txt'
  ck=$(stockade checkpoint "$id" before-edit)
  stockade exec "$id" -- sh -c 'echo v2 > notes.txt; rm -f data.bin'
  stockade rollback "$id" before-edit          # or: stockade rollback "$id" "$ck"
  stockade sandbox create --from "$ck"
  stockade checkpoint ls "$id"
`,
	"rollback": `usage: stockade rollback SANDBOX CHECKPOINT

Restore a checkpoint (its ck-… id, or a name among the sandbox's checkpoints)
into the sandbox's /workspace/work. Write-ahead: the intent is journaled
(sandbox.rolling_back) and the sandbox admits no process; its processes are
stopped (each journaled); the workload container is restarted around the
copy, so every process of the sandbox ends, tracked or not (background and
setsid ones too), and /tmp and the home directory start empty; the
checkpoint is written beside the workspace and the two directories are
exchanged in one rename; the fact is journaled (sandbox.rolled_back). A
crash at any point leaves the old workspace or the new one, never a mix: the
next recovery journals which (rolled_back, or rollback_abandoned). It takes
about a second plus the copy, and leaves an empty /workspace/.rollback-N. A
stopped sandbox cannot be rolled back: make a new one from the checkpoint
(sandbox create --from).

  stockade rollback "$id" before-edit
`,
	"pool": `usage: stockade pool ls|resize

  ls [--json]          the server's warm pools: NAME SIZE READY FILLING WARM
                       COLD FAILURES IMAGE, and a LAST ERROR column when a
                       refill failed (--json: one object a pool)
  resize NAME N        set a pool's size: growing starts refills, shrinking
                       removes the ready sandboxes past N (0 empties it)

Pools are configured when the server starts (stockade serve --pool, see
stockade help serve); both commands need that server. READY is how many
wait for a claim, FILLING the creates under way; WARM counts the creates a
pool served, COLD the ones that matched it and found it empty.

  stockade pool ls
  stockade pool resize py 8
  stockade --json pool ls
`,
	"recover": `usage: stockade recover [--dry-run] [--stop-processes]

Runs (or, with --dry-run, only plans) the recovery Open does and prints each
sandbox's decision, what was observed, and the orphans removed.
--stop-processes stops the processes still running in re-adopted sandboxes
instead of re-adopting them detached.

  stockade recover --dry-run
  stockade recover --json
  stockade recover --stop-processes
`,
	"drill": `usage: stockade drill [--failpoints a,b] [--random N] [--seed S] [--dir D] [--hostile]

Kills a child runtime at each failpoint (and N random moments), recovers, and
checks the invariants: nothing leaked, nothing foreign touched, the journal
replays, a re-adopted sandbox runs a new process with one warden, every ask
answered, a rollback's journaled outcome is its workspace. With no
--failpoints, every failpoint is drilled; --seed S repeats the --random
moments of an earlier run; --dir D keeps the drills' journals there;
--hostile runs a survivor of the workload (setsid, a double fork, planting
links and markers) beside every checkpoint and rollback.

  stockade drill --hostile
  stockade drill --failpoints sandbox.reserved,process.reserved
  stockade drill --failpoints '' --random 20 --seed 7 --dir ./drills
`,
	"logs": `usage: ` + logsUsage + `

Prints a process's recorded output: stdout and stderr, each to its own
stream, in the order they arrived. It reads the recording files beside the
journal, not the runtime: it works while a server or an embedded command
holds the journal, after the process ended and after the runtime is gone.
A gap in the recording (beyond its bounds, or a crash's last second) is a
line on stderr saying how many bytes are missing.

  --stdout | --stderr  only that stream
  -f, --follow         then follow a running process until it ends (needs
                       stockade serve: only a living runtime writes the
                       recording)
  --json               one JSON object a chunk ({"stream", "offset", "text"
                       or "base64"}; a gap's "bytes"), then {"stream":"end",
                       "summary"}

  pid=$(stockade exec -d "$id" -- make test)
  stockade logs "$pid"
  stockade logs -f --stderr "$pid"
  stockade --json logs "$pid"
`,
	"diff":   diffHelp,
	"usage":  usageHelp,
	"replay": replayHelp,
	"help": `usage: stockade help [COMMAND]

Prints the list of commands, or a command's usage with examples (the same
as COMMAND --help).

  stockade help
  stockade help exec
`,
	"completion": `usage: stockade completion bash|zsh|fish

Prints a shell completion script:

  source <(stockade completion bash)
  stockade completion fish > ~/.config/fish/completions/stockade.fish
`,
}

// ttyHelp is what -t does, for run and exec.
const ttyHelp = `
TERMINALS (-t): CMD runs on a pseudo-terminal in the sandbox (only a sandbox
with its warden has one; elsewhere the start fails with unsupported). All of
its output comes on stdout. The terminal starts at the size of the one on
stockade's stdout and follows it (SIGWINCH). With -i and a terminal on stdin,
that terminal is raw while CMD runs (every key, Ctrl-C included, goes to CMD)
and is restored when stockade ends. Without -i, keys stay local: Ctrl-C stops
CMD as usual. -t needs no local terminal: when stdout is not one (a pipe, a
file) CMD's terminal keeps the kernel's default size (0x0; most programs
then assume 80x24) and never resizes; stdin that is not a terminal is passed
as it is.
`

// subcommands are what completion offers after each command.
var subcommands = map[string][]string{
	"sandbox":    {"create", "ls", "inspect", "stop", "rm", "network"},
	"pool":       {"ls", "resize"},
	"checkpoint": {"ls", "rm"},
	"journal":    {"show", "replay", "diff", "tail", "export", "ls", "verify", "restore"},
	"completion": {"bash", "zsh", "fish"},
}

type completionCmd struct{ shell string }

func parseCompletion(_ global, args []string) (command, error) {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		return nil, helpRequest{"completion"}
	}
	if len(args) != 1 || !strings.Contains(" bash zsh fish ", " "+args[0]+" ") {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "completion", "name one shell: bash, zsh or fish")
	}
	return &completionCmd{shell: args[0]}, nil
}

func (c *completionCmd) execute(_ context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	cmds := make([]string, 0, len(commandHelp))
	for name := range commandHelp {
		cmds = append(cmds, name)
	}
	sort.Strings(cmds)
	out := &printer{w: stdout}
	top := strings.Join(cmds, " ")
	switch c.shell {
	case "bash", "zsh":
		if c.shell == "zsh" {
			out.println("autoload -U +X bashcompinit && bashcompinit")
		}
		out.printf("_stockade() {\n  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}\n")
		out.printf("  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", top)
		out.printf("  case \"$cmd\" in\n")
		for _, name := range cmds {
			if subs, ok := subcommands[name]; ok {
				out.printf("    %s) [ \"$COMP_CWORD\" -eq 2 ] && COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", name, strings.Join(subs, " "))
			}
		}
		out.printf("    cp) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n  esac\n}\ncomplete -F _stockade stockade\n")
	case "fish":
		out.printf("complete -c stockade -f -n '__fish_use_subcommand' -a %q\n", top)
		for _, name := range cmds {
			if subs, ok := subcommands[name]; ok {
				out.printf("complete -c stockade -f -n '__fish_seen_subcommand_from %s' -a %q\n", name, strings.Join(subs, " "))
			}
		}
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// networkHelp explains --network.
const networkHelp = `
NETWORK
  isolated (default)   loopback only
  open                 a bridge network of the sandbox's own: everything the
                       host reaches ("bridge" is its old name)
  allow=RULE[,RULE...] no route out but the sandbox's egress proxy, which
                       admits HTTP CONNECT and plain HTTP to what a rule
                       allows; processes get HTTP(S)_PROXY. A rule is a host
                       (example.com, *.example.com), an IP or a CIDR, each
                       with an optional :port. Private, loopback, link-local
                       and metadata addresses need a rule naming them.
                       Decisions: stockade journal show ID --egress
`
