// Package dockertest gives tests a real Docker daemon, the sandbox image and a
// per-test owner label whose resources are removed when the test ends, pass
// or fail.
//
// Under CI=true a test that needs Docker fails when the daemon does not
// answer; outside CI it is skipped with a message saying why.
package dockertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
)

// ImageTag is the sandbox image `make image` builds.
const ImageTag = "stockade/toolbox:dev"

// OwnerLabel is the label key every stockade resource carries.
const OwnerLabel = "io.stockade.owner"

// Client returns a client for the daemon in the environment, with API version
// negotiation. It fails the test under CI=true when the daemon does not
// answer, and skips it otherwise.
func Client(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx)
		if err == nil {
			cli.NegotiateAPIVersion(ctx)
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Docker daemon does not answer (CI=true, so this fails): %v", err)
		}
		t.Skipf("skipping: the Docker daemon does not answer: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() }) // closes idle connections only
	return cli
}

// Owner returns a fresh owner id for this test and registers a cleanup that
// removes every container, network and volume labelled with it — and only
// those.
func Owner(t testing.TB, cli *client.Client) string {
	t.Helper()
	owner := "test" + RandomHex(8)
	t.Cleanup(func() {
		if err := RemoveOwned(context.Background(), cli, owner); err != nil {
			t.Errorf("cleanup of owner %s: %v", owner, err)
		}
	})
	return owner
}

// RemoveOwned force-removes every container, then network, then volume that
// carries io.stockade.owner=owner.
func RemoveOwned(ctx context.Context, cli *client.Client, owner string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", OwnerLabel+"="+owner))
	var errs []error
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	errs = append(errs, err)
	for _, c := range cs {
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	errs = append(errs, err)
	for _, n := range ns {
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	errs = append(errs, err)
	for _, v := range vs.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ImageID resolves the sandbox image tag to its ID, building the image with
// scripts/image.sh first if the daemon does not have it.
func ImageID(t testing.TB, cli *client.Client) string {
	t.Helper()
	return imageByScript(t, cli, ImageTag, "image.sh")
}

// PythonImageTag is the realistic test image (python3, coreutils, procps)
// that `make image-python` builds from Debian's packages.
const PythonImageTag = "stockade/python:dev"

// PythonImageID resolves the realistic image to its ID, building it with
// scripts/image-python.sh (mmdebstrap, about half a minute) first if the
// daemon does not have it.
func PythonImageID(t testing.TB, cli *client.Client) string {
	t.Helper()
	return imageByScript(t, cli, PythonImageTag, "image-python.sh")
}

func imageByScript(t testing.TB, cli *client.Client, tag, script string) string {
	t.Helper()
	ctx := context.Background()
	img, err := cli.ImageInspect(ctx, tag)
	if cerrdefs.IsNotFound(err) {
		root, rerr := ModuleRoot()
		if rerr != nil {
			t.Fatalf("image %s missing and the module root is unknown: %v", tag, rerr)
		}
		out, berr := exec.Command(filepath.Join(root, "scripts", script)).CombinedOutput()
		if berr != nil {
			t.Fatalf("building %s with scripts/%s: %v\n%s", tag, script, berr, out)
		}
		img, err = cli.ImageInspect(ctx, tag)
	}
	if err != nil {
		t.Fatalf("inspecting image %s: %v", tag, err)
	}
	return img.ID
}

// ModuleRoot finds the directory holding go.mod, walking up from the working
// directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// RandomHex returns n random bytes, hex-encoded.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return strings.ToLower(hex.EncodeToString(b))
}

// CleanupOwner registers a cleanup that removes every resource labelled
// with owner (an owner made elsewhere, e.g. by a runtime's new journal).
func CleanupOwner(t testing.TB, cli *client.Client, owner string) {
	t.Helper()
	t.Cleanup(func() {
		if err := RemoveOwned(context.Background(), cli, owner); err != nil {
			t.Errorf("cleanup of owner %s: %v", owner, err)
		}
	})
}

// Owned counts the containers, networks and volumes labelled with owner.
func Owned(ctx context.Context, cli *client.Client, owner string) (int, error) {
	f := filters.NewArgs(filters.Arg("label", OwnerLabel+"="+owner))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, err
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return 0, err
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return 0, err
	}
	return len(cs) + len(ns) + len(vs.Volumes), nil
}

// DevtoolsImageTag is the benchmarks' developer image (git, python3 with its
// whole standard library, coreutils, tar, grep) that
// scripts/image-devtools.sh builds from Debian's packages.
const DevtoolsImageTag = "stockade/devtools:dev"

// DevtoolsImageID resolves the developer image to its ID, building it with
// scripts/image-devtools.sh (mmdebstrap, about a minute) first if the
// daemon does not have it.
func DevtoolsImageID(t testing.TB, cli *client.Client) string {
	t.Helper()
	return imageByScript(t, cli, DevtoolsImageTag, "image-devtools.sh")
}
