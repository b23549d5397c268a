package dockerio

import (
	"context"
	"strings"

	"github.com/stockade/stockade/spec"
)

// KillWorkload stops the fake workload, as a kill of its container would.
func (f *Fake) KillWorkload(ctx context.Context, sb Sandbox) error {
	var wardens []*fakeWarden
	err := f.with(ctx, "KillWorkload", sb, func(s *fakeSandbox) error {
		s.running, s.exit = false, &ContainerExit{ExitCode: 137}
		wardens = s.takeWardens()
		return nil
	})
	stopWardens(wardens)
	return err
}

// RestartWorkload starts the fake workload again.
func (f *Fake) RestartWorkload(ctx context.Context, sb Sandbox) error {
	return f.with(ctx, "RestartWorkload", sb, func(s *fakeSandbox) error {
		s.running, s.exit = true, nil
		s.use = CgroupSample{} // a new run: its cgroup counts from zero
		return nil
	})
}

// StageRollback makes the fake's staging directory with root's marker in it.
func (f *Fake) StageRollback(ctx context.Context, sb Sandbox, staging, marker string) error {
	if err := markerName(marker); err != nil {
		return err
	}
	return f.withStaging(ctx, "StageRollback", sb, staging, func(s *fakeSandbox) error {
		s.files[staging+"/"] = fakeFile{mode: 0o700}
		s.files[staging+"/"+marker+"/"] = fakeFile{mode: 0o755, root: true}
		return nil
	})
}

// withStaging runs fn on the fake workspace of sb under the lock, once the
// call is entered and staging named well.
func (f *Fake) withStaging(ctx context.Context, op string, sb Sandbox, staging string, fn func(s *fakeSandbox) error) error {
	if err := f.enter(ctx, op); err != nil {
		return err
	}
	if err := stagingName(staging); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.export(sb)
	if err != nil {
		return err
	}
	return fn(s)
}

// ExchangeWorkspace swaps the fake's work/ and staging/ trees.
func (f *Fake) ExchangeWorkspace(ctx context.Context, sb Sandbox, staging string) error {
	return f.withStaging(ctx, "ExchangeWorkspace", sb, staging, func(s *fakeSandbox) error {
		work := "work/"
		stage := staging + "/"
		_, hasWork := s.files[work]
		_, hasStage := s.files[stage]
		if !hasWork || !hasStage {
			return spec.Errorf(spec.CodeEngine, "dockerio.fake", "exchange: %s or %s does not exist", work, stage)
		}
		moved := make(map[string]fakeFile, len(s.files))
		for n, v := range s.files {
			switch {
			case strings.HasPrefix(n, work):
				moved[stage+strings.TrimPrefix(n, work)] = v
			case strings.HasPrefix(n, stage):
				moved[work+strings.TrimPrefix(n, stage)] = v
			default:
				moved[n] = v
			}
		}
		s.files = moved
		return nil
	})
}

// MarkerProof reports whether the fake's dir holds root's marker.
func (f *Fake) MarkerProof(ctx context.Context, sb Sandbox, dir, marker string) (bool, error) {
	if err := markerName(marker); err != nil {
		return false, err
	}
	return f.readWorkspace(ctx, "MarkerProof", sb, dir+"/"+marker, func(s *fakeSandbox, rel string) bool {
		if m, ok := s.files[rel+"/"]; !ok || !m.root {
			return false
		}
		for n := range s.files {
			if strings.HasPrefix(n, rel+"/") && n != rel+"/" {
				return false // something in it
			}
		}
		return true
	})
}

// WorkspaceHas reports whether the fake workspace holds p.
func (f *Fake) WorkspaceHas(ctx context.Context, sb Sandbox, p string) (bool, error) {
	return f.readWorkspace(ctx, "WorkspaceHas", sb, p, func(s *fakeSandbox, rel string) bool {
		_, file := s.files[rel]
		_, dir := s.files[rel+"/"]
		return file || dir
	})
}

// readWorkspace answers a question about the workspace path p (rel: its
// key in the fake's files) under the lock, once the call is entered.
func (f *Fake) readWorkspace(ctx context.Context, op string, sb Sandbox, p string, fn func(s *fakeSandbox, rel string) bool) (bool, error) {
	if err := f.enter(ctx, op); err != nil {
		return false, err
	}
	dst, err := archivePath(p)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.export(sb)
	if err != nil {
		return false, err
	}
	return fn(s, strings.TrimPrefix(strings.TrimPrefix(dst, WorkspaceDir), "/")), nil
}

// EmptyWorkspaceDir empties the fake's dir and removes the files named.
func (f *Fake) EmptyWorkspaceDir(ctx context.Context, sb Sandbox, dir string, files ...string) error {
	return f.withStaging(ctx, "EmptyWorkspaceDir", sb, dir, func(s *fakeSandbox) error {
		for n := range s.files {
			if strings.HasPrefix(n, dir+"/") && n != dir+"/" {
				delete(s.files, n)
			}
		}
		for _, p := range files {
			dst, err := archivePath(p)
			if err != nil {
				return err
			}
			delete(s.files, strings.TrimPrefix(strings.TrimPrefix(dst, WorkspaceDir), "/"))
		}
		return nil
	})
}
