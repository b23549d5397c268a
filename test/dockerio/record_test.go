package dockerio

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestDockerioRecordInspect records real inspect JSON into
// dockerio/testdata for the readback unit tests. It runs only with
// STOCKADE_RECORD=1, and rewrites ids and the owner to fixed values so the
// files are stable (the fixtures' expectations use the same values).
func TestDockerioRecordInspect(t *testing.T) {
	if os.Getenv("STOCKADE_RECORD") != "1" {
		t.Skip("set STOCKADE_RECORD=1 to re-record dockerio/testdata")
	}
	e := testkit.NewDio(t)
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	save := func(name string, sb dockerio.Sandbox, id string) {
		_, raw, err := e.Docker.ContainerInspectWithRaw(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		s := string(raw)
		for old, repl := range map[string]string{e.Owner: "OWNER", sb.ID: "SANDBOX"} {
			s = strings.ReplaceAll(s, old, repl)
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, []byte(s), "", "  "); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "dockerio", "testdata", name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	iso := e.Sandbox(t, nil)
	save("engine20-workload-started.json", iso, iso.Workload)
	save("engine20-export-created.json", iso, iso.Export)
	br, err := e.Adapter.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: testkit.NewID(), Spec: e.Spec(func(s *spec.Sandbox) { s.Policy.Network = spec.NetworkBridge })})
	if err != nil {
		t.Fatal(err)
	}
	save("engine20-bridge-workload-created.json", br, br.Workload)
	if err := e.Adapter.StartSandbox(ctx, br); err != nil {
		t.Fatal(err)
	}
	save("engine20-bridge-workload-started.json", br, br.Workload)
	t.Logf("bridge network id %s", br.Network)
	if err := os.WriteFile(filepath.Join(root, "dockerio", "testdata", "engine20-bridge-network-id.txt"), []byte(br.Network+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := e.Docker.ImageInspect(ctx, e.Image)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := json.Marshal(img.Config.Env)
	if err := os.WriteFile(filepath.Join(root, "dockerio", "testdata", "engine20-image-env.json"), env, 0o644); err != nil {
		t.Fatal(err)
	}
}
