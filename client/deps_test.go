package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoRuntimeDeps: a client links neither the actor system, the Docker
// client, nor the journal's store: the CLI as a client stays small, and
// the shared types stay in leaf packages (host/, spec/, lifecycle/).
func TestNoRuntimeDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/stockade/stockade/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/asynkron/protoactor-go", "github.com/docker/docker", "go.etcd.io/bbolt", "github.com/stockade/stockade/internal/actors", "github.com/stockade/stockade/dockerio"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("client depends on %s", dep)
			}
		}
	}
}
