package dockerio

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/stockade/stockade/internal/dockertest"
)

// TestPlumbing proves the Docker plumbing: the test image exists (or is
// built), a container starts with the seed's isolation flags, `id` runs in it
// as the unprivileged user, and everything made is removed.
func TestPlumbing(t *testing.T) {
	cli := dockertest.Client(t)
	owner := dockertest.Owner(t, cli)
	image := dockertest.ImageID(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	init := true
	pids := int64(64)
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image:      image,
		User:       "65532:65532",
		Entrypoint: []string{"/bin/sh"},
		Cmd:        []string{"-c", "id"},
		Env:        []string{"HOME=/home/sandbox", "TMPDIR=/tmp"},
		Labels:     map[string]string{dockertest.OwnerLabel: owner},
	}, &container.HostConfig{
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		IpcMode:        "private",
		CgroupnsMode:   "private",
		NetworkMode:    "none",
		Init:           &init,
		Resources:      container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, NanoCPUs: 1e9, PidsLimit: &pids},
	}, nil, nil, "")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start: %v", err)
	}
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			t.Fatalf("id exited %d", w.StatusCode)
		}
	case err := <-errC:
		t.Fatalf("wait: %v", err)
	}
	logs, err := cli.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	defer func() { _ = logs.Close() }()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, io.LimitReader(logs, 1<<20)); err != nil {
		t.Fatalf("logs: %v", err)
	}
	if got := stdout.String(); !strings.HasPrefix(got, "uid=65532") || !strings.Contains(got, "gid=65532") {
		t.Fatalf("id printed %q (stderr %q), want uid=65532 gid=65532", got, stderr.String())
	}
}
