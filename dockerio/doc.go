// Package dockerio is the only package of stockade that talks to Docker. It
// defines the Engine seam (engine.go) the actors use, implements it against
// the daemon with *Adapter, and in memory with *Fake (fake.go) for unit
// tests. Every error it returns is a *spec.Error; Docker's errors are
// translated here (not found → not_found, conflict → conflict, a done
// context → cancelled/timeout, anything else → engine) and wrapped, so
// errors.Is still reaches the cause. It knows nothing of the journal or the
// actors.
//
// # Roles
//
// Engine is the union of small role interfaces, each the calls one kind of
// caller makes: Checks (Preflight, ResolveImage: the runtime's Open and
// create), Sandboxes (create, start, verify, stop, remove, pause: the
// sandbox actor; the process actor verifies), Inventory (ListOwned,
// InspectSandbox, RemoveOwned: recovery and reconcile), Execs (create,
// attach, inspect, process groups, OOM count: the process actor; the
// sandbox actor signals groups), Files (Put/GetArchive), Wardens, Egress
// (the sandbox actor) and Events (the runtime's watcher). A caller that
// needs one role takes that role.
//
// Package dockerio/enginetest is the conformance suite of Engine: the Fake
// passes it in this package's tests, the Adapter against Docker in test/dockerio/,
// so the Fake cannot drift from Docker unnoticed. Its deliberate
// differences are listed on Fake.
//
// # Profiles and preflight
//
// A Profile is data: what the daemon must look like and what stockade asks
// of it. linux-x64 (the default) and two Docker Desktop profiles give every
// guarantee; linux-x64-engine20-cgroupv1 describes Docker Engine 20.10 on a
// cgroup v1 host and names, in Profile.Relaxes, every guarantee it gives up
// and why. The profile is always named (Options.Profile, $STOCKADE_PROFILE,
// else linux-x64); dockerio never picks "the first that passes".
// CheckDaemon is a pure function of the observed Facts; Doctor and
// Adapter.Report return the report (every check, its observed value,
// pass/fail, and a remedy) that the CLI's doctor prints with Report.WriteTo.
// Preflight returns the daemon id the journal records.
//
// # The sandbox
//
// CreateSandbox admits the policy (profile.AdmitPolicy: invalid_argument for a
// malformed one, unsupported for one Docker cannot honour exactly) and the
// image (admitImage: pinned ID, present, Linux, the profile's architecture,
// no declared volumes), then makes, named stockade-<owner>-<sandbox>-<role>
// and labelled io.stockade.{owner,sandbox,role,revision}: the volume, the
// bridge network unless isolated, the export container and the workload
// container, both with exactly the locked-down body (ContainerBody) plus
// HostConfig.Init. A resource found by name is adopted only if all its labels
// match (else conflict, and the foreign resource is never touched). Both
// containers are read back (verify, a pure function over the inspect JSON,
// every field of the lockdown: user, entrypoint and command, environment,
// read-only root, capabilities, security options, namespaces, limits,
// restart policy, tmpfs, ports, devices, network, plus image, name, labels,
// Init and mounts); /workspace/work is seeded, owned by uid:gid, with the
// warden's binary, through the export container's archive API. The slow
// steps run side by side: once the workload container is read back its
// start begins, and the export container's create, its readback and the
// seed run beside the start; StartSandbox waits for all of them and reads
// the workload back again, running. Until StartSandbox returns, nothing
// but the keeper runs in the workload (seed.go says what holds). Any
// mismatch removes every resource of the sandbox and returns unsupported
// naming the field.
//
// # Exec
//
// CreateExec returns the exec id (journal it) and AttachExec starts it. The
// command runs under a small shell wrapper (builtins only: no extra
// process) that checks it is the leader of its own process group, writes
// the group id to /tmp/.stockade-<process>.pgid in the sandbox's tmpfs,
// prints a marker line carrying it on stdout and execs the argv. AttachExec
// consumes the marker and returns the group in Attachment.Group. Output is
// pull-style: Attachment.Next decodes the next piece (≤ 64 KiB of one
// frame, frames ≤ 1 MiB) only when asked, so the caller's credit is the
// backpressure; dockerio runs no read loop.
//
// # Traps, and how each is handled
//
//   - The v28 client defaults to API 1.51, which older engines refuse.
//     Version negotiation is used for /version and /info; once the profile
//     admitted the daemon's API range, the client is pinned to the profile's
//     API version (1.41 here, 1.52 for linux-x64, which the v28 client would
//     otherwise never reach by negotiation). Tested: the adapter drives 1.41.
//   - Before API 1.42 the attach response always says raw-stream: the media
//     type check (application/vnd.docker.multiplexed-stream) applies from
//     1.42 on; below it the stream is multiplexed because a TTY is never
//     requested (Tty false is fixed in CreateExec and checked in readback).
//   - The hijacked response may already hold output in its bufio.Reader:
//     decoding is from resp.Reader, never resp.Conn. CloseWrite is checked to
//     exist before an exec with stdin is returned; the connection is closed
//     on every error path of AttachExec and when Next fails.
//   - ExecInspect's ExitCode reads 0 while the process runs: InspectExec
//     sets ExitCode only when Running is false. Tested.
//   - The end of the output stream is not the end of the process (nor the
//     reverse: a descendant holding stdout delays EOF; Docker 20.10 closes the
//     stream a couple of seconds after the exec's process exits). The
//     runtime learns an exec's end from its exec_die event (Events) and
//     confirms it with InspectExec; WaitExec polls, for short helper execs
//     and tests. Tested with a setsid'd survivor.
//   - After a dropped attach the daemon may report a phantom exit 126 while
//     the process lives on: SignalGroup(pgid, 0) probes the group (nil while
//     a member lives, not_found when none does) before a 126 is believed.
//   - Exec records vanish minutes after exit and on daemon restart:
//     InspectExec returns Known=false (no error) for a 404; callers record the
//     exit code as soon as Running is false.
//   - Docker cannot signal an exec: SignalGroup runs `kill -<sig> -<pgid>` in
//     a second exec as the sandbox user. A descendant that calls setsid
//     leaves the group and survives until the workload stops. Tested.
//   - Exec start failures arrive as text on stdout with exit 126/127: when
//     the output ends before the wrapper's marker, AttachExec returns
//     exec_failed quoting Docker's text; for a command the wrapper could not
//     exec (127 not found, 126 not executable, text on stderr), ExecFailure
//     turns (exit code, output) into exec_failed. Tested both ways.
//   - The daemon drops limits the kernel cannot enforce with only a
//     warning: hence readback after create and after start, and admission
//     refusing sizes the kernel would round (memory and tmpfs not a whole
//     number of pages).
//   - OOMKilled is per container, not per exec (and sticky on 20.10), and a
//     cgroup v1 oom event names no process: StopSandbox/InspectSandbox
//     report it for the workload only. For a process, the exec wrapper reads
//     the memory cgroup's oom_kill count at its start (Attachment.OOMKills)
//     and OOMKills reads it again when the process died of a SIGKILL: a rise
//     names the OOM killer (ambiguous with several processes: documented).
//   - Exec is never privileged and never has a TTY (CreateExec fixes both).
//   - Zombies: PID 1 is the engine's init (HostConfig.Init, verified), which
//     reaps orphans. Tested.
//   - Network names are not unique before API 1.44 unless CheckDuplicate is
//     sent (the v28 client sends it); the network is also looked up by exact
//     name first, and adopted only with our labels.
//   - Archive reads while the workload runs see a live filesystem; for a
//     consistent copy the caller freezes it (PauseSandbox/UnpauseSandbox:
//     the sandbox actor journals the freeze and counts concurrent copies).
//     Docker refuses execs into a paused container and refuses to stop one:
//     StopSandbox thaws it first.
//
// # Caveats
//
// The process group file lives in the sandbox's own /tmp: the sandbox user
// can rewrite it; it only ever names a group of that same user. Image
// datasets are refused on profiles without them; their readback path is
// unit-tested against a synthesized document and is unverified against a
// real daemon here. Events delivers die and exec_die events of the owner's
// containers; the daemon drops events for a slow reader and replays only
// its recent ones after a resubscription, so its users confirm by inspect.
package dockerio
