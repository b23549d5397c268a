package server

import (
	"errors"
	"io"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
)

// files serves the Files service.
type files struct {
	stockadev1.UnimplementedFilesServer
	s *Server
}

// Put feeds the client's tar chunks to Sandbox.Put through a pipe: a chunk
// is received only once the one before was taken, so the client's sends
// wait on the extraction.
func (v files) Put(stream stockadev1.Files_PutServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	sb, err := v.s.h.Sandbox(ctx, first.SandboxId)
	if err != nil {
		return toStatus(err)
	}
	pr, pw := io.Pipe()
	go func() {
		m := first
		for {
			if len(m.Data) > 0 {
				if _, err := pw.Write(m.Data); err != nil {
					return // Put stopped reading: its error is the answer
				}
			}
			var err error
			if m, err = stream.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
		}
	}()
	err = sb.Put(ctx, first.Dir, pr)
	pr.CloseWithError(io.ErrClosedPipe) // frees the receiver if Put stopped early
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&stockadev1.PutResponse{})
}

// Get streams Sandbox.Get's tar, one chunk per message, each read only
// once the one before was sent.
func (v files) Get(req *stockadev1.GetRequest, stream stockadev1.Files_GetServer) error {
	ctx := stream.Context()
	sb, err := v.s.h.Sandbox(ctx, req.SandboxId)
	if err != nil {
		return toStatus(err)
	}
	rc, live, err := sb.Get(ctx, req.Path, req.Pause)
	if err != nil {
		return toStatus(err)
	}
	defer func() {
		// Closing unpauses a paused workload: a failure is worth knowing.
		if err := rc.Close(); err != nil {
			v.s.log.Warn("closing a copy's stream failed", "sandbox", req.SandboxId, "err", err)
		}
	}()
	if err := stream.Send(&stockadev1.GetResponse{Live: live}); err != nil {
		return err
	}
	buf := make([]byte, Chunk)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if err := stream.Send(&stockadev1.GetResponse{Live: live, Data: buf[:n]}); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return toStatus(err)
		}
	}
}
