package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/stockade/stockade/internal/apiconv"
	"github.com/stockade/stockade/profile"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	stockade "github.com/stockade/stockade"
	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// The pinned gRPC settings (see the package doc).
const (
	// Window is each stream's and each connection's HTTP/2 flow-control
	// window: what a client that stops reading may have in flight.
	Window = 1 << 20
	// MaxStreams bounds the concurrent calls of one connection.
	MaxStreams = 256
	// Chunk bounds the bytes of one output, stdin or tar message.
	Chunk = 32 << 10
)

// Options configure New.
type Options struct {
	// Logger receives the server's logs; nil is quiet.
	Logger *slog.Logger
	// Doctor answers the Doctor call; nil asks the runtime's (its
	// daemon against the profile it was opened with).
	Doctor func(ctx context.Context) (profile.Report, error)
}

// Server serves one runtime.
type Server struct {
	h    host.Runtime
	log  *slog.Logger
	opts Options
	grpc *grpc.Server

	mu    sync.Mutex
	procs map[string]host.Process // started here and not yet ended
	// stopping is closed by Stop: streams that end then leave their
	// processes running (the server goes away, not the client).
	stopping chan struct{}
	stopOnce sync.Once
	// shutdown is closed when a client asked for Shutdown.
	shutdown     chan struct{}
	shutdownOnce sync.Once
}

// New returns a server of rt (an embedded runtime's Host(): the server
// reaches the runtime through host.Runtime alone). It does not own rt:
// close rt after Stop.
func New(rt host.Runtime, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{h: rt, log: opts.Logger, opts: opts, procs: map[string]host.Process{}, stopping: make(chan struct{}), shutdown: make(chan struct{})}
	s.grpc = grpc.NewServer(
		grpc.InitialWindowSize(Window),
		grpc.InitialConnWindowSize(Window),
		grpc.MaxConcurrentStreams(MaxStreams),
		grpc.UnaryInterceptor(traceUnary),
		grpc.StreamInterceptor(traceStream),
	)
	stockadev1.RegisterSandboxesServer(s.grpc, sandboxes{s: s})
	stockadev1.RegisterProcessesServer(s.grpc, processes{s: s})
	stockadev1.RegisterFilesServer(s.grpc, files{s: s})
	stockadev1.RegisterJournalServer(s.grpc, journalService{s: s})
	stockadev1.RegisterPoolsServer(s.grpc, poolService{s: s})
	stockadev1.RegisterCheckpointsServer(s.grpc, checkpoints{s: s})
	return s
}

// Serve accepts connections on lis until Stop; it returns nil after Stop.
func (s *Server) Serve(lis net.Listener) error {
	err := s.grpc.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop stops accepting, gives unary calls up to grace to finish, then
// cancels every call still open (attached processes are left running:
// the runtime's Close leaves them to the next Open). It returns when every
// handler has returned.
func (s *Server) Stop(grace time.Duration) {
	s.stopOnce.Do(func() { close(s.stopping) })
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		s.grpc.Stop()
		<-done
	}
}

func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// remember keeps a started process's handle until it ends.
func (s *Server) remember(p host.Process) {
	s.mu.Lock()
	s.procs[p.ID()] = p
	s.mu.Unlock()
	go func() {
		<-p.Done()
		s.mu.Lock()
		delete(s.procs, p.ID())
		s.mu.Unlock()
	}()
}

// process finds a process by id: one started through this server (its
// handle), else any the journal holds, as the runtime's host API finds it
// (running or ended, re-adopted after a restart included).
func (s *Server) process(ctx context.Context, id string) (host.Process, error) {
	s.mu.Lock()
	p := s.procs[id]
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	return s.h.Process(ctx, id)
}

func wireResult(r spec.Result) *stockadev1.Result {
	out := &stockadev1.Result{ExitCode: int32(r.ExitCode), Reason: r.Reason, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Usage: apiconv.ProcessUsage(r.Usage)}
	if r.Err != nil {
		out.Error = wireError(r.Err)
	}
	if !r.Started.IsZero() {
		out.Started = timestamppb.New(r.Started)
	}
	if !r.Ended.IsZero() {
		out.Ended = timestamppb.New(r.Ended)
	}
	return out
}

// sandboxes serves the Sandboxes service.
type sandboxes struct {
	stockadev1.UnimplementedSandboxesServer
	s *Server
}

func (v sandboxes) Create(ctx context.Context, req *stockadev1.CreateSandboxRequest) (*stockadev1.CreateSandboxResponse, error) {
	pol, err := apiconv.FromPolicy(req.Policy)
	if err != nil {
		return nil, toStatus(err)
	}
	ss := spec.Sandbox{Image: req.Image, Policy: pol, Datasets: apiconv.FromDatasets(req.Datasets), Lifetime: spec.Lifetime(req.Lifetime),
		TTL: req.Ttl.AsDuration(), Env: req.Env, Dir: req.Dir, Labels: req.Labels, From: req.From, Secrets: apiconv.FromSecretVars(req.Secrets)}
	sb, err := v.s.h.CreateSandbox(ctx, ss)
	if err != nil {
		return nil, toStatus(err)
	}
	return &stockadev1.CreateSandboxResponse{Id: sb.ID()}, nil
}

func (v sandboxes) List(ctx context.Context, _ *stockadev1.ListSandboxesRequest) (*stockadev1.ListSandboxesResponse, error) {
	infos, err := v.s.h.Sandboxes(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &stockadev1.ListSandboxesResponse{}
	for _, i := range infos {
		out.Sandboxes = append(out.Sandboxes, &stockadev1.SandboxInfo{
			Id: i.ID, Phase: string(i.Phase), Image: i.Image, Lifetime: string(i.Lifetime), Adopted: i.Adopted,
			Processes: i.Processes, Reserved: timestamppb.New(i.Reserved), Unreconciled: i.Unreconciled, Why: i.Why,
			Pool: i.Pool, Labels: i.Labels, Claimed: i.Claimed,
		})
	}
	return out, nil
}

func (v sandboxes) Inspect(ctx context.Context, req *stockadev1.InspectSandboxRequest) (*stockadev1.InspectSandboxResponse, error) {
	sb, err := v.s.h.Sandbox(ctx, req.Id)
	if err != nil {
		return nil, toStatus(err)
	}
	st, err := sb.State(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &stockadev1.InspectSandboxResponse{State: apiconv.SandboxState(st)}, nil
}

func (v sandboxes) Stop(ctx context.Context, req *stockadev1.StopSandboxRequest) (*stockadev1.StopSandboxResponse, error) {
	sb, err := v.s.h.Sandbox(ctx, req.Id)
	if err == nil {
		err = sb.Stop(ctx)
	}
	return &stockadev1.StopSandboxResponse{}, toStatus(err)
}

func (v sandboxes) SetSecrets(ctx context.Context, req *stockadev1.SetSecretsRequest) (*stockadev1.SetSecretsResponse, error) {
	sb, err := v.s.h.Sandbox(ctx, req.Id)
	if err == nil {
		err = sb.SetSecrets(ctx, apiconv.FromSecretVars(req.Secrets))
	}
	return &stockadev1.SetSecretsResponse{}, toStatus(err)
}

func (v sandboxes) SetEgress(ctx context.Context, req *stockadev1.SetEgressRequest) (*stockadev1.SetEgressResponse, error) {
	rules := make([]spec.EgressRule, 0, len(req.Rules))
	for _, r := range req.Rules {
		rule, err := spec.ParseEgressRule(r)
		if err != nil {
			return nil, toStatus(err)
		}
		rules = append(rules, rule)
	}
	sb, err := v.s.h.Sandbox(ctx, req.Id)
	if err == nil {
		err = sb.SetEgress(ctx, rules)
	}
	return &stockadev1.SetEgressResponse{}, toStatus(err)
}

func (v sandboxes) Egress(ctx context.Context, req *stockadev1.EgressRequest) (*stockadev1.EgressResponse, error) {
	ds, err := v.s.h.Egress(ctx, req.Id)
	if err != nil {
		return nil, toStatus(err)
	}
	return &stockadev1.EgressResponse{Decisions: apiconv.Decisions(ds)}, nil
}

func (v sandboxes) Remove(ctx context.Context, req *stockadev1.RemoveSandboxRequest) (*stockadev1.RemoveSandboxResponse, error) {
	sb, err := v.s.h.Sandbox(ctx, req.Id)
	if err == nil {
		err = sb.Remove(ctx)
	}
	return &stockadev1.RemoveSandboxResponse{}, toStatus(err)
}

// poolService serves the Pools service.
type poolService struct {
	stockadev1.UnimplementedPoolsServer
	s *Server
}

func (v poolService) List(ctx context.Context, _ *stockadev1.ListPoolsRequest) (*stockadev1.ListPoolsResponse, error) {
	infos, err := v.s.h.Pools(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &stockadev1.ListPoolsResponse{}
	for _, p := range infos {
		out.Pools = append(out.Pools, &stockadev1.PoolInfo{Name: p.Name, Image: p.Image, Size: int64(p.Size), Ready: int64(p.Ready),
			Filling: int64(p.Filling), Warm: p.Warm, Cold: p.Cold, Failures: p.Failures, LastError: p.LastError})
	}
	return out, nil
}

func (v poolService) Resize(ctx context.Context, req *stockadev1.ResizePoolRequest) (*stockadev1.ResizePoolResponse, error) {
	// A size past int's range (or MaxPoolSize) is the runtime's to refuse:
	// clamped to one it refuses the same way, not wrapped into range.
	size := int(max(min(req.Size, stockade.MaxPoolSize+1), -1))
	return &stockadev1.ResizePoolResponse{}, toStatus(v.s.h.ResizePool(ctx, req.Name, size))
}

// journalService serves the Journal service.
type journalService struct {
	stockadev1.UnimplementedJournalServer
	s *Server
}

// Follow streams a sandbox's events (or every entity's) as the runtime
// commits them. A send that blocks (the client does not read) holds up
// only this follower; one that falls too far behind ends with an error.
func (v journalService) Follow(req *stockadev1.FollowRequest, stream stockadev1.Journal_FollowServer) error {
	err := v.s.h.Follow(stream.Context(), req.SandboxId, func(e host.HistoryEvent) error {
		return stream.Send(wireEvent(e))
	})
	return toStatus(err)
}

// Export streams the journal's JSON lines in chunks. The export is taken
// into an unlinked temporary file first and streamed from there: a slow
// client must not keep the journal's read transaction open (a commit that
// grows the file waits for every reader), so it holds up only itself.
func (v journalService) Export(_ *stockadev1.ExportRequest, stream stockadev1.Journal_ExportServer) error {
	f, err := os.CreateTemp("", "stockade-export-*")
	if err != nil {
		return toStatus(spec.Wrap(spec.CodeInternal, "server", err, "a temporary file for the export"))
	}
	// Unlinked at once: the file goes with its last descriptor.
	if err := os.Remove(f.Name()); err != nil {
		v.s.log.Warn("unlinking the export's temporary file failed", "file", f.Name(), "err", err)
	}
	defer func() { _ = f.Close() }() // unlinked: nothing to lose
	if err := v.s.h.Export(stream.Context(), f); err != nil {
		return toStatus(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return toStatus(spec.Wrap(spec.CodeInternal, "server", err, "rewinding the export"))
	}
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&stockadev1.ExportChunk{Data: b}) }}
	if _, err := io.Copy(w, f); err != nil {
		return toStatus(err)
	}
	return toStatus(w.flush())
}

func (v journalService) Live(ctx context.Context, _ *stockadev1.LiveRequest) (*stockadev1.LiveResponse, error) {
	list, err := v.s.h.Live(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &stockadev1.LiveResponse{}
	for _, e := range list {
		out.Entities = append(out.Entities, &stockadev1.LiveEntity{Kind: e.Kind, Id: e.ID, Parent: e.Parent, LastType: e.Last, LastSeq: e.Seq, Updated: timestamppb.New(e.Updated)})
	}
	return out, nil
}

func (v journalService) Verify(ctx context.Context, _ *stockadev1.VerifyRequest) (*stockadev1.VerifyResponse, error) {
	return &stockadev1.VerifyResponse{}, toStatus(v.s.h.Verify(ctx))
}

// chunkWriter gathers writes into messages of at most 64 KiB.
type chunkWriter struct {
	buf  []byte
	send func([]byte) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := 64<<10 - len(w.buf)
		take := min(room, len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == 64<<10 {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = nil // the message owns the bytes sent
	return err
}

func wireEvent(e host.HistoryEvent) *stockadev1.HistoryEvent {
	return &stockadev1.HistoryEvent{Kind: e.Kind, Id: e.ID, Seq: e.Seq, Time: timestamppb.New(e.Time), Type: e.Type, PayloadJson: e.Payload}
}

func (v journalService) History(ctx context.Context, req *stockadev1.HistoryRequest) (*stockadev1.HistoryResponse, error) {
	evs, err := v.s.h.History(ctx, req.SandboxId)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &stockadev1.HistoryResponse{}
	for _, e := range evs {
		out.Events = append(out.Events, wireEvent(e))
	}
	return out, nil
}

func (v journalService) Replay(ctx context.Context, req *stockadev1.ReplayRequest) (*stockadev1.ReplayResponse, error) {
	if req.Process {
		st, err := v.s.h.ReplayProcess(ctx, req.Id, req.At)
		if err != nil {
			return nil, toStatus(err)
		}
		return &stockadev1.ReplayResponse{State: &stockadev1.ReplayResponse_Process{Process: apiconv.ProcessState(st)}}, nil
	}
	st, err := v.s.h.ReplaySandbox(ctx, req.Id, req.At)
	if err != nil {
		return nil, toStatus(err)
	}
	return &stockadev1.ReplayResponse{State: &stockadev1.ReplayResponse_Sandbox{Sandbox: apiconv.SandboxState(st)}}, nil
}

func (v journalService) Recovery(ctx context.Context, _ *stockadev1.RecoveryRequest) (*stockadev1.RecoveryResponse, error) {
	r, err := v.s.h.Recovery(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &stockadev1.RecoveryResponse{Processes: int64(r.Processes), Duration: durationpb.New(r.Duration)}
	for _, o := range r.Orphans {
		out.Orphans = append(out.Orphans, o.String())
	}
	for _, sb := range r.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, &stockadev1.RecoveredSandbox{Id: sb.ID, From: string(sb.From), Decision: sb.Decision, Observed: sb.Observed, Settled: string(sb.Settled), Error: sb.Error})
	}
	return out, nil
}

func (v journalService) Doctor(ctx context.Context, _ *stockadev1.DoctorRequest) (*stockadev1.DoctorResponse, error) {
	doctor := v.s.opts.Doctor
	if doctor == nil {
		doctor = v.s.h.Doctor
	}
	rep, err := doctor(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &stockadev1.DoctorResponse{Profile: rep.Profile, Revision: rep.Revision, DaemonId: rep.DaemonID, Version: rep.Version, ApiVersion: rep.APIVersion}
	for _, r := range rep.Relaxes {
		out.Relaxes = append(out.Relaxes, &stockadev1.Relaxation{Guarantee: r.Guarantee, Why: r.Why})
	}
	for _, c := range rep.Checks {
		out.Checks = append(out.Checks, &stockadev1.Check{Name: c.Name, Observed: c.Observed, Want: c.Want, Ok: c.OK, Required: c.Required, Remedy: c.Remedy})
	}
	return out, nil
}

// Shutdown stops the runtime's sandboxes and closes it
// (host.Runtime.Shutdown), then tells the program serving it to stop
// (ShutdownRequested); the answer goes out before the server stops.
func (v journalService) Shutdown(ctx context.Context, _ *stockadev1.ShutdownRequest) (*stockadev1.ShutdownResponse, error) {
	err := v.s.h.Shutdown(ctx)
	v.s.shutdownOnce.Do(func() { close(v.s.shutdown) })
	if err != nil {
		return nil, toStatus(err)
	}
	return &stockadev1.ShutdownResponse{}, nil
}

// ShutdownRequested is closed once a client asked for Shutdown: the
// runtime is shut down and the program serving it should Stop and exit.
func (s *Server) ShutdownRequested() <-chan struct{} { return s.shutdown }
