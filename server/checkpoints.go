package server

import (
	"context"
	"encoding/json"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// checkpoints serves the Checkpoints service.
type checkpoints struct {
	stockadev1.UnimplementedCheckpointsServer
	s *Server
}

func checkpointInfo(i host.CheckpointInfo) (*stockadev1.CheckpointInfo, error) {
	b, err := json.Marshal(i)
	if err != nil {
		return nil, spec.Wrap(spec.CodeInternal, "server", err, "encoding checkpoint %s", i.ID)
	}
	return &stockadev1.CheckpointInfo{InfoJson: b}, nil
}

func (v checkpoints) Create(ctx context.Context, req *stockadev1.CreateCheckpointRequest) (*stockadev1.CheckpointInfo, error) {
	sb, err := v.s.h.Sandbox(ctx, req.SandboxId)
	if err != nil {
		return nil, toStatus(err)
	}
	info, err := sb.Checkpoint(ctx, req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := checkpointInfo(info)
	return out, toStatus(err)
}

func (v checkpoints) List(ctx context.Context, req *stockadev1.ListCheckpointsRequest) (*stockadev1.ListCheckpointsResponse, error) {
	infos, err := v.s.h.Checkpoints(ctx, req.SandboxId)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &stockadev1.ListCheckpointsResponse{}
	for _, i := range infos {
		c, err := checkpointInfo(i)
		if err != nil {
			return nil, toStatus(err)
		}
		out.Checkpoints = append(out.Checkpoints, c)
	}
	return out, nil
}

func (v checkpoints) Remove(ctx context.Context, req *stockadev1.RemoveCheckpointRequest) (*stockadev1.RemoveCheckpointResponse, error) {
	return &stockadev1.RemoveCheckpointResponse{}, toStatus(v.s.h.RemoveCheckpoint(ctx, req.Id))
}

func (v checkpoints) Rollback(ctx context.Context, req *stockadev1.RollbackRequest) (*stockadev1.RollbackResponse, error) {
	sb, err := v.s.h.Sandbox(ctx, req.SandboxId)
	if err == nil {
		err = sb.Rollback(ctx, req.Checkpoint)
	}
	return &stockadev1.RollbackResponse{}, toStatus(err)
}
