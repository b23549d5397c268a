package server

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// checkpoints serves the Checkpoints service.
type checkpoints struct {
	stockadev1.UnimplementedCheckpointsServer
	s *Server
}

func checkpointInfo(i host.CheckpointInfo) (*stockadev1.CheckpointInfo, error) {
	return &stockadev1.CheckpointInfo{Id: i.ID, Name: i.Name, SandboxId: i.Sandbox, Image: i.Image, Created: timestamppb.New(i.Created),
		Files: int64(i.Files), Bytes: i.Bytes, Env: i.Env, Dir: i.Dir, Skipped: i.Skipped}, nil
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
