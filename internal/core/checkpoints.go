package core

import (
	"context"
	"io"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	"github.com/stockade/stockade/checkpoint"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// checkpointStore is the runtime's checkpoint store, opened at the first
// use (most runtimes never take one) and reconciled with the journal then.
type checkpointStore struct {
	once  sync.Once
	store *checkpoint.Store
	err   error
}

// checkpoints opens the store beside the journal. A manifest whose
// sandbox's stream does not journal it was stored by a runtime killed
// before its checkpointed fact: nobody was told of it, and it goes.
func (rt *Runtime) checkpoints() (*checkpoint.Store, error) {
	c := &rt.ckpt
	c.once.Do(func() {
		c.store, c.err = checkpoint.Open(statedir.Checkpoints(rt.journal.Path()), rt.ckptLimit)
		if c.err != nil {
			return
		}
		ms, err := c.store.List()
		if err != nil {
			c.err = err
			return
		}
		for _, m := range ms {
			st, err := recovery.FoldSandbox(rt.journal, m.Sandbox)
			if err != nil || st.Phase == lifecycle.PhaseNone {
				continue // a stream retention removed: the store stands
			}
			if !journaledCheckpoint(st, m.ID) {
				rt.log.Warn("removing a checkpoint its journal never named (its runtime ended before it)", "checkpoint", m.ID, "sandbox", m.Sandbox)
				if err := c.store.Remove(m.ID); err != nil {
					rt.log.Warn("removing an unjournaled checkpoint failed", "checkpoint", m.ID, "err", err)
				}
			}
		}
	})
	return c.store, c.err
}

func journaledCheckpoint(st lifecycle.Sandbox, id string) bool {
	for _, c := range st.Checkpoints {
		if c.ID == id {
			return true
		}
	}
	return false
}

func checkpointInfo(m checkpoint.Manifest) host.CheckpointInfo {
	return host.CheckpointInfo{ID: m.ID, Name: m.Name, Sandbox: m.Sandbox, Image: m.Image, Created: m.Created,
		Files: m.Files, Bytes: m.Bytes, Env: m.Env, Dir: m.Dir, Skipped: m.Skipped}
}

// Checkpoint captures /workspace/work into the runtime's content-addressed
// checkpoint store with the workload frozen for the copy (a pause and
// unpause journaled around it), with what a restart needs (env, dir,
// image), and journals sandbox.checkpointed. name is optional, unique
// among the sandbox's checkpoints ([a-z0-9][a-z0-9._-]{0,62}). A full
// store fails resource_exhausted and keeps nothing of this one.
func (s *Sandbox) Checkpoint(ctx context.Context, name string) (_ host.CheckpointInfo, err error) {
	ctx, sp := s.rt.startSpan(ctx, "stockade.checkpoint", journal.Key{Kind: journal.KindSandbox, ID: s.id})
	defer func() { sp.end(err) }()
	store, err := s.rt.checkpoints()
	if err != nil {
		return host.CheckpointInfo{}, err
	}
	if name != "" {
		if err := checkpoint.CheckName(name); err != nil {
			return host.CheckpointInfo{}, err
		}
		if _, err := store.Find(s.id, name); err == nil {
			return host.CheckpointInfo{}, spec.Errorf(spec.CodeConflict, "checkpoint", "sandbox %s already has a checkpoint named %q", s.id, name)
		}
	}
	st, err := s.State(ctx)
	if err != nil {
		return host.CheckpointInfo{}, err
	}
	rc, _, err := s.Get(ctx, "work", true)
	if err != nil {
		return host.CheckpointInfo{}, err
	}
	m, err := store.Capture(ctx, rc, checkpoint.Meta{Sandbox: s.id, Name: name, Image: st.Spec.Image,
		Env: st.Spec.Env, Dir: st.Spec.Dir, Created: s.rt.deps.Now()})
	if cerr := rc.Close(); err == nil && cerr != nil {
		err = spec.Wrap(spec.CodeEngine, "checkpoint", cerr, "closing the copy of sandbox %s", s.id)
	}
	if err != nil {
		return host.CheckpointInfo{}, err
	}
	failpoint.Hit(failpoint.CheckpointStored)
	ev := lifecycle.Checkpointed{ID: m.ID, Name: m.Name, Files: m.Files, Bytes: m.Bytes}
	jerr, aerr := ask(ctx, s, func(r chan<- error) any { return sandbox.RecordCheckpoint{Event: ev, Reply: r} }, nil)
	if aerr != nil {
		// The caller went away with the fact possibly journaled: the
		// manifest stays, and the next open of the store keeps it or
		// removes it by what the journal says.
		return host.CheckpointInfo{}, aerr
	}
	if jerr != nil {
		if rerr := store.Remove(m.ID); rerr != nil {
			s.rt.log.Warn("removing a checkpoint that was not journaled failed", "checkpoint", m.ID, "err", rerr)
		}
		return host.CheckpointInfo{}, jerr
	}
	return checkpointInfo(m), nil
}

// Rollback restores a checkpoint (its id, or a name among this sandbox's
// checkpoints) into /workspace/work. Write-ahead (lifecycle.RollingBack):
// admission closes, the sandbox's processes are stopped (each journaled),
// the checkpoint is written beside the workspace and the two are exchanged
// in one rename, then the fact is journaled. A crash at any point leaves
// the old workspace or the new one, never a mix; recovery journals which.
func (s *Sandbox) Rollback(ctx context.Context, ck string) error {
	ctx, sp := s.rt.startSpan(ctx, "stockade.rollback", journal.Key{Kind: journal.KindSandbox, ID: s.id}, attribute.String("stockade.checkpoint", ck))
	err := s.rollback(ctx, ck, false)
	sp.end(err)
	return err
}

func (s *Sandbox) rollback(ctx context.Context, ck string, restore bool) error {
	store, err := s.rt.checkpoints()
	if err != nil {
		return err
	}
	m, err := store.Find(s.id, ck)
	if err != nil {
		return err
	}
	st, err := s.State(ctx)
	if err != nil {
		return err
	}
	u := st.Spec.Policy.User
	write := func(w io.Writer, root string) error { return store.Restore(m.ID, w, root, int(u.UID), int(u.GID)) }
	err, aerr := ask(ctx, s, func(r chan<- error) any {
		return sandbox.Rollback{Checkpoint: m.ID, Write: write, Restore: restore, Reply: r}
	}, nil)
	if aerr != nil {
		return aerr
	}
	return err
}

// Checkpoints lists the store's checkpoints, oldest first: a sandbox's, or
// every one ("").
func (rt *Runtime) Checkpoints(_ context.Context, sandboxID string) ([]host.CheckpointInfo, error) {
	store, err := rt.checkpoints()
	if err != nil {
		return nil, err
	}
	ms, err := store.List()
	if err != nil {
		return nil, err
	}
	out := []host.CheckpointInfo{}
	for _, m := range ms {
		if sandboxID == "" || m.Sandbox == sandboxID {
			out = append(out, checkpointInfo(m))
		}
	}
	return out, nil
}

// RemoveCheckpoint deletes a checkpoint from the store (content no other
// checkpoint shares goes with it). The journal keeps its history.
func (rt *Runtime) RemoveCheckpoint(_ context.Context, id string) error {
	store, err := rt.checkpoints()
	if err != nil {
		return err
	}
	return store.Remove(id)
}

// fromCheckpoint fills a create's spec from the checkpoint it starts from:
// its id, and its env and dir where the caller gave none.
func (rt *Runtime) fromCheckpoint(full *spec.Sandbox, from string) error {
	store, err := rt.checkpoints()
	if err != nil {
		return err
	}
	m, err := store.Get(from)
	if err != nil {
		return err
	}
	full.From = m.ID
	if len(full.Env) == 0 {
		full.Env = m.Env
	}
	if full.Dir == "" {
		full.Dir = m.Dir
	}
	return nil
}
