package client

import (
	"context"
	"errors"
	"io"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/apiconv"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Sandbox is a sandbox of the server's runtime.
type Sandbox struct {
	c  *Client
	id string
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// State returns the sandbox's folded state.
func (s *Sandbox) State(ctx context.Context) (lifecycle.Sandbox, error) {
	resp, err := s.c.sbx.Inspect(ctx, &stockadev1.InspectSandboxRequest{Id: s.id})
	if err != nil {
		return lifecycle.Sandbox{}, fromStatus(err)
	}
	return apiconv.FromSandboxState(resp.State)
}

// Stop stops the sandbox (resources kept); it returns once it exited.
func (s *Sandbox) Stop(ctx context.Context) error {
	_, err := s.c.sbx.Stop(ctx, &stockadev1.StopSandboxRequest{Id: s.id})
	return fromStatus(err)
}

// SetEgress replaces an allowlist sandbox's egress rules while it runs.
func (s *Sandbox) SetEgress(ctx context.Context, rules []spec.EgressRule) error {
	texts := make([]string, len(rules))
	for i, r := range rules {
		texts[i] = r.String()
	}
	_, err := s.c.sbx.SetEgress(ctx, &stockadev1.SetEgressRequest{Id: s.id, Rules: texts})
	return fromStatus(err)
}

// SetSecrets gives the values of the sandbox's secret variables again.
func (s *Sandbox) SetSecrets(ctx context.Context, secrets []spec.SecretVar) error {
	_, err := s.c.sbx.SetSecrets(ctx, &stockadev1.SetSecretsRequest{Id: s.id, Secrets: apiconv.SecretVars(secrets)})
	return fromStatus(err)
}

// Remove stops the sandbox if needed and deletes every resource.
func (s *Sandbox) Remove(ctx context.Context) error {
	_, err := s.c.sbx.Remove(ctx, &stockadev1.RemoveSandboxRequest{Id: s.id})
	return fromStatus(err)
}

// Put extracts a tar stream into /workspace/<dir>. The tar is sent as the
// server takes it; a failed extraction ends the call with its error.
func (s *Sandbox) Put(ctx context.Context, dir string, tar io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.c.files.Put(ctx)
	if err != nil {
		return fromStatus(err)
	}
	if err := stream.Send(&stockadev1.PutRequest{SandboxId: s.id, Dir: dir}); err != nil {
		_, rerr := stream.CloseAndRecv()
		return fromStatus(rerr)
	}
	buf := make([]byte, chunk)
	for {
		n, rerr := tar.Read(buf)
		if n > 0 {
			if err := stream.Send(&stockadev1.PutRequest{Data: buf[:n]}); err != nil {
				// io.EOF: the server ended the call; its status says why.
				_, serr := stream.CloseAndRecv()
				return fromStatus(serr)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			// Cancelling fails the server's tar stream: nothing half-read
			// is taken for a whole archive.
			cancel()
			return spec.Wrap(spec.CodeInvalidArgument, "client", rerr, "reading the tar to put into sandbox %s", s.id)
		}
	}
	_, err = stream.CloseAndRecv()
	return fromStatus(err)
}

// Get returns a tar stream of /workspace/<path>; live says the copy was
// taken from a running workload's filesystem. The caller closes the
// stream; ctx bounds its whole life.
func (s *Sandbox) Get(ctx context.Context, path string, pause bool) (io.ReadCloser, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := s.c.files.Get(ctx, &stockadev1.GetRequest{SandboxId: s.id, Path: path, Pause: pause})
	if err != nil {
		cancel()
		return nil, false, fromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, false, fromStatus(err)
	}
	return &tarReader{stream: stream, cancel: cancel, buf: first.Data}, first.Live, nil
}

// tarReader reads a Get stream's chunks.
type tarReader struct {
	stream stockadev1.Files_GetClient
	cancel context.CancelFunc
	buf    []byte
	err    error
}

func (r *tarReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		m, err := r.stream.Recv()
		if err != nil {
			r.err = fromStatus(err)
			continue
		}
		r.buf = m.Data
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close ends the call (unpausing a workload paused for the copy).
func (r *tarReader) Close() error {
	r.cancel()
	return nil
}

// Files is the sandbox's /workspace as files (host.Files), over this
// client's Put, Get and Start.
func (s *Sandbox) Files() host.Files { return host.FilesOf(s) }
