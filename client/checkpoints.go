package client

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
)

func decodeCheckpoint(c *stockadev1.CheckpointInfo) (host.CheckpointInfo, error) {
	i := host.CheckpointInfo{ID: c.Id, Name: c.Name, Sandbox: c.SandboxId, Image: c.Image, Files: int(c.Files), Bytes: c.Bytes,
		Env: c.Env, Dir: c.Dir, Skipped: c.Skipped}
	if c.Created != nil {
		i.Created = c.Created.AsTime()
	}
	return i, nil
}

// Checkpoints lists the server's checkpoints: a sandbox's, or all ("").
func (c *Client) Checkpoints(ctx context.Context, sandboxID string) ([]host.CheckpointInfo, error) {
	resp, err := c.ckpts.List(ctx, &stockadev1.ListCheckpointsRequest{SandboxId: sandboxID})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]host.CheckpointInfo, 0, len(resp.Checkpoints))
	for _, ck := range resp.Checkpoints {
		i, err := decodeCheckpoint(ck)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}

// RemoveCheckpoint deletes a checkpoint from the server's store.
func (c *Client) RemoveCheckpoint(ctx context.Context, id string) error {
	_, err := c.ckpts.Remove(ctx, &stockadev1.RemoveCheckpointRequest{Id: id})
	return fromStatus(err)
}

// Checkpoint captures the sandbox's /workspace/work into the server's
// checkpoint store (see stockade.Sandbox.Checkpoint).
func (s *Sandbox) Checkpoint(ctx context.Context, name string) (host.CheckpointInfo, error) {
	resp, err := s.c.ckpts.Create(ctx, &stockadev1.CreateCheckpointRequest{SandboxId: s.id, Name: name})
	if err != nil {
		return host.CheckpointInfo{}, fromStatus(err)
	}
	return decodeCheckpoint(resp)
}

// Rollback restores a checkpoint into the sandbox's workspace (see
// stockade.Sandbox.Rollback).
func (s *Sandbox) Rollback(ctx context.Context, checkpoint string) error {
	_, err := s.c.ckpts.Rollback(ctx, &stockadev1.RollbackRequest{SandboxId: s.id, Checkpoint: checkpoint})
	return fromStatus(err)
}
