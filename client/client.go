package client

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/apiconv"
	"github.com/stockade/stockade/internal/safedir"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// Window is the client's pinned HTTP/2 receive window, per stream and per
// connection: without it gRPC's BDP estimation grows it to 16 MiB, which a
// host that stops reading would hold in memory.
const Window = 1 << 20

// chunk bounds one stdin or tar message.
const chunk = 32 << 10

// Client is a connection to a stockade server.
type Client struct {
	conn  *grpc.ClientConn
	sbx   stockadev1.SandboxesClient
	procs stockadev1.ProcessesClient
	files stockadev1.FilesClient
	jrnl  stockadev1.JournalClient
	pools stockadev1.PoolsClient
	ckpts stockadev1.CheckpointsClient
	// long is a second connection for the long-lived streams (attached
	// execs, follows), as DESIGN asks: a host with as many of them as the
	// server's stream limit still gets its short calls (Stop, Signal, Wait)
	// through on conn.
	long    *grpc.ClientConn
	execs   stockadev1.ProcessesClient
	follows stockadev1.JournalClient
}

var (
	_ host.Runtime   = (*Client)(nil)
	_ host.Inspector = (*Client)(nil)
	_ host.Sandbox   = (*Sandbox)(nil)
	_ host.Process   = (*Process)(nil)
)

// MaxMessage bounds one reply the client accepts (a sandbox's whole
// history is one): far above gRPC's 4 MiB default, still bounded.
const MaxMessage = 256 << 20

// socketDir is what the directory of a socket the client dials must be:
// this user's or root's, and not writable by group or others. Its owner
// could have moved the server's socket aside and listen in its place; the
// client would hand it a sandbox's environment (an API token) and files.
// ssh is as strict with the files it trusts.
var socketDir = safedir.Rule{
	Op:   "client",
	What: "socket directory",
	Self: "this client",
	Deny: 0o022,
	Root: true,
	Risk: "the server there may be an impostor (its owner could move the socket aside and listen in its place), so nothing was sent to it",
	Else: "if it is yours, or choose another socket ($STOCKADE_SOCKET)",
}

// dialUnix connects to the socket at path through its directory, opened
// and checked first (socketDir): a refused directory is invalid_argument,
// and no connection is made to it. Every connection the client makes,
// reconnections too, is made this way.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	d, err := safedir.Open(filepath.Dir(path), socketDir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Close() }() // the connection, once made, needs it no more
	at := d.Join(filepath.Base(path))
	if len(at) > maxSocketPath {
		at = path // too long for a socket address that way
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "unix", at)
}

// maxSocketPath is the longest unix socket path the kernel takes.
const maxSocketPath = 107

// Dial connects to the server on the unix socket at path ("" means the
// default journal's server: $STOCKADE_SOCKET, else the socket beside
// $STOCKADE_JOURNAL or the default journal; see statedir.ServedSocket).
// It fails at once
// (cancelled, naming the path) when nothing answers there, so a caller can
// fall back to an embedded runtime; and with invalid_argument, connecting
// to nothing, when the socket's directory is another user's (not root's)
// or writable by others: whoever answers there may be an impostor.
func Dial(path string) (*Client, error) {
	if path == "" {
		var err error
		if path, err = statedir.ServedSocket(""); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	probe, err := dialUnix(ctx, path)
	cancel()
	if err != nil {
		if spec.IsCode(err, spec.CodeInvalidArgument) {
			return nil, err
		}
		return nil, spec.Wrap(spec.CodeCancelled, "client", err, "no stockade server answers on %s (start one with `stockade serve`)", path)
	}
	_ = probe.Close() // only asked whether it answers
	// The path is dialled as it is, not parsed as a URL: a relative path,
	// or one with '#', '?' or '%' in it, would be misread in a unix:// one.
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		return dialUnix(ctx, path)
	}
	newConn := func() (*grpc.ClientConn, error) {
		return grpc.NewClient("passthrough:///stockade",
			grpc.WithContextDialer(dial),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(Window),
			grpc.WithInitialConnWindowSize(Window),
			// A long history or listing is one message: allow it, bounded.
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage)),
			grpc.WithUnaryInterceptor(traceUnary),
			grpc.WithStreamInterceptor(traceStream),
		)
	}
	conn, err := newConn()
	if err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, "client", err, "socket %s", path)
	}
	long, err := newConn()
	if err != nil {
		_ = conn.Close() // err is the one reported
		return nil, spec.Wrap(spec.CodeInvalidArgument, "client", err, "socket %s", path)
	}
	return &Client{conn: conn, sbx: stockadev1.NewSandboxesClient(conn), procs: stockadev1.NewProcessesClient(conn),
		files: stockadev1.NewFilesClient(conn), jrnl: stockadev1.NewJournalClient(conn), pools: stockadev1.NewPoolsClient(conn),
		ckpts: stockadev1.NewCheckpointsClient(conn),
		long:  long, execs: stockadev1.NewProcessesClient(long), follows: stockadev1.NewJournalClient(long)}, nil
}

// Close closes the connections. Attached processes lose their client: each
// runs on detached (its input ended, its output recorded), unless it was
// started tied to its caller (spec.Process.StopWithCaller), which the
// server stops (cancelled); kept sandboxes stay up.
func (c *Client) Close() error { return errors.Join(c.long.Close(), c.conn.Close()) }

// CreateSandbox makes a sandbox and starts its workload.
func (c *Client) CreateSandbox(ctx context.Context, s spec.Sandbox) (host.Sandbox, error) {
	// Judged here as the embedded runtime judges it, so a bad spec gets
	// the same words both ways (one made from a checkpoint is judged by
	// the server, which holds the checkpoint).
	if s.From == "" {
		if err := s.WithDefaults().ValidateUnpinned(); err != nil {
			return nil, err
		}
	}
	req := &stockadev1.CreateSandboxRequest{Image: s.Image, Lifetime: string(s.Lifetime), Env: s.Env, Dir: s.Dir, Labels: s.Labels, From: s.From}
	if s.TTL != 0 {
		req.Ttl = durationpb.New(s.TTL)
	}
	req.Policy, req.Datasets, req.Secrets = apiconv.Policy(s.Policy), apiconv.Datasets(s.Datasets), apiconv.SecretVars(s.Secrets)
	resp, err := c.sbx.Create(ctx, req)
	if err != nil {
		return nil, fromStatus(err)
	}
	return &Sandbox{c: c, id: resp.Id}, nil
}

// Sandbox returns a live sandbox by id (not_found when there is none).
func (c *Client) Sandbox(ctx context.Context, id string) (host.Sandbox, error) {
	if _, err := c.sbx.Inspect(ctx, &stockadev1.InspectSandboxRequest{Id: id}); err != nil {
		return nil, fromStatus(err)
	}
	return &Sandbox{c: c, id: id}, nil
}

// Sandboxes lists the live sandboxes, sorted by reservation time.
func (c *Client) Sandboxes(ctx context.Context) ([]host.SandboxInfo, error) {
	resp, err := c.sbx.List(ctx, &stockadev1.ListSandboxesRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	var out []host.SandboxInfo
	for _, s := range resp.Sandboxes {
		out = append(out, host.SandboxInfo{ID: s.Id, Phase: lifecycle.Phase(s.Phase), Image: s.Image, Lifetime: spec.Lifetime(s.Lifetime),
			Adopted: s.Adopted, Processes: s.Processes, Reserved: s.Reserved.AsTime(), Unreconciled: s.Unreconciled, Why: s.Why,
			Pool: s.Pool, Labels: s.Labels, Claimed: s.Claimed})
	}
	return out, nil
}

// Pools lists the server's warm pools, in the order they were configured.
func (c *Client) Pools(ctx context.Context) ([]host.PoolInfo, error) {
	resp, err := c.pools.List(ctx, &stockadev1.ListPoolsRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]host.PoolInfo, 0, len(resp.Pools))
	for _, p := range resp.Pools {
		out = append(out, host.PoolInfo{Name: p.Name, Image: p.Image, Size: int(p.Size), Ready: int(p.Ready), Filling: int(p.Filling),
			Warm: p.Warm, Cold: p.Cold, Failures: p.Failures, LastError: p.LastError})
	}
	return out, nil
}

// ResizePool sets a server's pool's size: growing starts refills,
// shrinking removes the ready sandboxes past the new size (not_found for
// an unknown pool). It is the served form of stockade.Runtime.ResizePool.
func (c *Client) ResizePool(ctx context.Context, name string, size int) error {
	_, err := c.pools.Resize(ctx, &stockadev1.ResizePoolRequest{Name: name, Size: int64(size)})
	return fromStatus(err)
}

// History returns a sandbox's and its processes' journaled events.
func (c *Client) History(ctx context.Context, id string) ([]host.HistoryEvent, error) {
	resp, err := c.jrnl.History(ctx, &stockadev1.HistoryRequest{SandboxId: id})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]host.HistoryEvent, 0, len(resp.Events))
	for _, e := range resp.Events {
		out = append(out, fromEvent(e))
	}
	return out, nil
}

func fromEvent(e *stockadev1.HistoryEvent) host.HistoryEvent {
	return host.HistoryEvent{Kind: e.Kind, ID: e.Id, Seq: e.Seq, Time: e.Time.AsTime(), Type: e.Type, Payload: e.PayloadJson}
}

// Follow calls fn with a sandbox's history, then with each of its and its
// processes' events as the server commits them, until ctx ends (nil) or fn
// or the stream fails; with id "", every entity's new events (a tail).
func (c *Client) Follow(ctx context.Context, id string, fn func(host.HistoryEvent) error) error {
	stream, err := c.follows.Follow(ctx, &stockadev1.FollowRequest{SandboxId: id})
	if err != nil {
		return fromStatus(err)
	}
	for {
		e, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fromStatus(err)
		}
		if err := fn(fromEvent(e)); err != nil {
			return err
		}
	}
}

// Egress returns a sandbox's recorded egress decisions, oldest first.
func (c *Client) Egress(ctx context.Context, id string) ([]egress.Decision, error) {
	resp, err := c.sbx.Egress(ctx, &stockadev1.EgressRequest{Id: id})
	if err != nil {
		return nil, fromStatus(err)
	}
	return apiconv.FromDecisions(resp.Decisions), nil
}

// Recovery returns the report of the recovery the server's Open ran.
func (c *Client) Recovery(ctx context.Context) (host.RecoveryReport, error) {
	resp, err := c.jrnl.Recovery(ctx, &stockadev1.RecoveryRequest{})
	if err != nil {
		return host.RecoveryReport{}, fromStatus(err)
	}
	out := host.RecoveryReport{Processes: int(resp.Processes), Duration: resp.Duration.AsDuration()}
	for _, o := range resp.Orphans {
		out.Orphans = append(out.Orphans, host.ParseOrphan(o))
	}
	for _, s := range resp.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, host.RecoveredSandbox{ID: s.Id, From: lifecycle.Phase(s.From), Decision: s.Decision,
			Observed: s.Observed, Settled: lifecycle.Phase(s.Settled), Error: s.Error})
	}
	return out, nil
}

// ReplaySandbox folds a sandbox's stream up to sequence at (0: its end).
func (c *Client) ReplaySandbox(ctx context.Context, id string, at uint64) (lifecycle.Sandbox, error) {
	resp, err := c.jrnl.Replay(ctx, &stockadev1.ReplayRequest{Id: id, At: at})
	if err != nil {
		return lifecycle.Sandbox{}, fromStatus(err)
	}
	w := resp.GetSandbox()
	if w == nil {
		return lifecycle.Sandbox{}, spec.Errorf(spec.CodeInternal, "client", "the server's replay of sandbox %s has no sandbox state", id)
	}
	return apiconv.FromSandboxState(w)
}

// ReplayProcess folds a process's stream up to sequence at (0: its end).
func (c *Client) ReplayProcess(ctx context.Context, id string, at uint64) (lifecycle.Process, error) {
	resp, err := c.jrnl.Replay(ctx, &stockadev1.ReplayRequest{Id: id, Process: true, At: at})
	if err != nil {
		return lifecycle.Process{}, fromStatus(err)
	}
	w := resp.GetProcess()
	if w == nil {
		return lifecycle.Process{}, spec.Errorf(spec.CodeInternal, "client", "the server's replay of process %s has no process state", id)
	}
	return apiconv.FromProcessState(w), nil
}

// Doctor returns the server's check of its daemon against its profile.
func (c *Client) Doctor(ctx context.Context) (profile.Report, error) {
	resp, err := c.jrnl.Doctor(ctx, &stockadev1.DoctorRequest{})
	if err != nil {
		return profile.Report{}, fromStatus(err)
	}
	rep := profile.Report{Profile: resp.Profile, Revision: resp.Revision, DaemonID: resp.DaemonId, Version: resp.Version, APIVersion: resp.ApiVersion}
	for _, r := range resp.Relaxes {
		rep.Relaxes = append(rep.Relaxes, profile.Relaxation{Guarantee: r.Guarantee, Why: r.Why})
	}
	for _, ch := range resp.Checks {
		rep.Checks = append(rep.Checks, profile.Check{Name: ch.Name, Observed: ch.Observed, Want: ch.Want, OK: ch.Ok, Required: ch.Required, Remedy: ch.Remedy})
	}
	return rep, nil
}

// Shutdown asks the server to stop its runtime's sandboxes (one-shot ones
// removed), remove its pools' sandboxes, close the runtime and stop
// serving (host.Runtime.Shutdown); the client is closed after.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.jrnl.Shutdown(ctx, &stockadev1.ShutdownRequest{})
	if cerr := c.Close(); err == nil && cerr != nil {
		return spec.Wrap(spec.CodeInternal, "client", cerr, "closing the connection after the shutdown")
	}
	return fromStatus(err)
}

// Signal sends sig to a process's group by id (one started through this
// server).
func (c *Client) Signal(ctx context.Context, processID string, sig syscall.Signal) error {
	_, err := c.procs.Signal(ctx, &stockadev1.SignalRequest{ProcessId: processID, Signal: int32(sig)})
	return fromStatus(err)
}

// StopProcess stops a process by id: TERM, then KILL after the grace.
func (c *Client) StopProcess(ctx context.Context, processID string) error {
	_, err := c.procs.Stop(ctx, &stockadev1.StopProcessRequest{ProcessId: processID})
	return fromStatus(err)
}

// Wait waits for a process's end by id (a detached one, say). err is the
// result's typed error, as Process.Wait's.
func (c *Client) Wait(ctx context.Context, processID string) (spec.Result, error) {
	resp, err := c.procs.Wait(ctx, &stockadev1.WaitRequest{ProcessId: processID})
	if err != nil {
		return spec.Result{ExitCode: -1}, fromStatus(err)
	}
	r := fromResult(resp.Result)
	return r, r.Err
}

func fromResult(w *stockadev1.Result) spec.Result {
	r := spec.Result{ExitCode: int(w.ExitCode), Reason: w.Reason, StdoutBytes: w.StdoutBytes, StderrBytes: w.StderrBytes, Usage: apiconv.FromProcessUsage(w.Usage)}
	if w.Error != nil {
		r.Err = fromWire(w.Error)
	}
	if w.Started != nil {
		r.Started = w.Started.AsTime()
	}
	if w.Ended != nil {
		r.Ended = w.Ended.AsTime()
	}
	return r
}

// Export writes the server's journal as JSON lines to w.
func (c *Client) Export(ctx context.Context, w io.Writer) error {
	stream, err := c.jrnl.Export(ctx, &stockadev1.ExportRequest{})
	if err != nil {
		return fromStatus(err)
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fromStatus(err)
		}
		if _, err := w.Write(chunk.Data); err != nil {
			return err
		}
	}
}

// Live lists the server's journal's live entities.
func (c *Client) Live(ctx context.Context) ([]host.LiveEntity, error) {
	resp, err := c.jrnl.Live(ctx, &stockadev1.LiveRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]host.LiveEntity, 0, len(resp.Entities))
	for _, e := range resp.Entities {
		out = append(out, host.LiveEntity{Kind: e.Kind, ID: e.Id, Parent: e.Parent, Last: e.LastType, Seq: e.LastSeq, Updated: e.Updated.AsTime()})
	}
	return out, nil
}

// Verify checks the server's journal (every record, stream, fold, index).
func (c *Client) Verify(ctx context.Context) error {
	_, err := c.jrnl.Verify(ctx, &stockadev1.VerifyRequest{})
	return fromStatus(err)
}

// Logs hands fn a process's recorded output, in the order it was written,
// then says how the recording ends.
func (c *Client) Logs(ctx context.Context, processID string, fn func(host.OutputChunk) error) (host.OutputSummary, error) {
	stream, err := c.procs.Logs(ctx, &stockadev1.LogsRequest{ProcessId: processID})
	if err != nil {
		return host.OutputSummary{}, fromStatus(err)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return host.OutputSummary{}, fromStatus(err)
		}
		if m.Summary != nil {
			return fromSummary(m.Summary), nil
		}
		if err := fn(fromChunk(m)); err != nil {
			return host.OutputSummary{}, err
		}
	}
}

// Attach hands fn process processID's output from o.From on, recorded then
// live, until it ends (host.Process.Attach says all): the process handed
// out by Process or Start does the same.
func (c *Client) Attach(ctx context.Context, processID string, o host.AttachOptions, fn func(host.OutputChunk) error) (host.Attached, error) {
	out := host.Attached{Result: spec.Result{ExitCode: -1}}
	stream, err := c.procs.Attach(ctx, &stockadev1.AttachRequest{ProcessId: processID, From: o.From})
	if err != nil {
		return out, fromStatus(err)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = spec.Errorf(spec.CodeStreamFailure, "client", "the server ended the attach to process %s without its end", processID)
			}
			return out, fromStatus(err)
		}
		switch msg := m.Msg.(type) {
		case *stockadev1.AttachMessage_Chunk:
			ch := fromChunk(msg.Chunk)
			// Counted here too: an attach that ends early says what it
			// handed out, as the embedded one does.
			switch ch.Stream {
			case "stdout":
				out.Output.StdoutBytes += int64(len(ch.Data))
			case "stderr":
				out.Output.StderrBytes += int64(len(ch.Data))
			default:
				out.Output.Missing += ch.Gap
			}
			out.Output.Recorded += int64(len(ch.Data))
			if err := fn(ch); err != nil {
				return out, err
			}
		case *stockadev1.AttachMessage_End:
			if msg.End.Output != nil {
				out.Output = fromSummary(msg.End.Output)
			}
			if msg.End.Result != nil {
				out.Result = fromResult(msg.End.Result)
			}
			return out, nil
		default:
			return out, spec.Errorf(spec.CodeInternal, "client", "the server sent an attach message this client does not know (%T): upgrade the client", m.Msg)
		}
	}
}

func fromChunk(m *stockadev1.LogsChunk) host.OutputChunk {
	ch := host.OutputChunk{Offset: m.Offset, Data: m.Data, Gap: m.Gap, Lost: m.Lost}
	switch m.Stream {
	case stockadev1.Stream_STREAM_STDOUT:
		ch.Stream = "stdout"
	case stockadev1.Stream_STREAM_STDERR:
		ch.Stream = "stderr"
	case stockadev1.Stream_STREAM_UNSPECIFIED:
		// A gap: no stream ("", host.OutputChunk).
	}
	return ch
}

func fromSummary(s *stockadev1.OutputSummary) host.OutputSummary {
	return host.OutputSummary{Complete: s.Complete, Torn: s.Torn, StdoutBytes: s.StdoutBytes, StderrBytes: s.StderrBytes,
		Recorded: s.Recorded, Missing: s.Missing, Dropped: s.Dropped, Head: s.Head, Tail: s.Tail}
}
