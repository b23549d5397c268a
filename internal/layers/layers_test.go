package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/stockade/stockade"

// rank is each package's layer: a package may import only packages of a
// lower rank. A new package must be placed here (the test names it if
// not), and in docs/design.md's drawing of the layers, which
// TestDesignDrawsTheRanks compares with this table.
var rank = map[string]int{
	// Leaves: the domain types, the API's generated code, crash points.
	"spec": 0, "api": 0, "api/stockade/v1": 0, "internal/failpoint": 0, "helpers/internal/manifest": 0,
	"internal/survivor": 0, "warden/wire": 0,
	// The names the runtime's spans carry and the trace context's
	// propagation (the OpenTelemetry API only).
	"tracing": 0,

	// The state directory's layout, profiles, owned directories.
	"statedir": 1, "internal/safedir": 1, "profile": 1,
	// Trace export from the OTEL_* environment (the SDK and its
	// exporters: the programs link it, the runtime does not).
	"tracing/exporter": 1,

	// The warden library (stockade-warden's server, run in-process by the
	// Fake) sits below the runtime's end of its link, whose tests run it.
	"framing": 2, "warden": 2, "lifecycle": 2, "journal": 2, "egress": 2, "checkpoint": 2, "textdiff": 2,

	"recorder": 3, "host": 3, "dockerio": 3, "warden/link": 3, "internal/apiconv": 3,

	// internal/drilldocker: what the drill asks of Docker beside the
	// runtime it drills; internal/retention: what a journal no longer needs.
	"dockerio/enginetest": 4, "host/hosttest": 4, "inspect": 4, "client": 4, "internal/actors": 4, "metrics": 4, "rerun": 4,
	"internal/drilldocker": 4, "internal/retention": 4,

	// internal/drillcheck: the crash drill's checks of a journal and its
	// recordings (the CLI's drill runs them, test/drill again).
	"internal/actors/process": 5, "internal/drillcheck": 5, "mcpserver": 5,

	// The warm pools, behind the runtime's narrow Maker seam: no actors,
	// no Docker.
	"internal/actors/sandbox": 6, "internal/pool": 6,

	// What recovery reads before it acts (internal/core decides with the
	// sandbox actor's Decide); the embedded helper binaries, which
	// internal/core installs.
	"internal/recovery": 7, "helpers": 7,

	// The runtime behind the root's facade: composition, the live
	// registry, events, recovery, the pools' and checkpoints' wiring.
	"internal/core": 8,
	// The root package: the embedded API, a facade over internal/core.
	"": 9,

	"server": 10, "kubenode": 10,
	// internal/sandboxflag: a policy's and a pool's flags, read alike by
	// every command that takes them.
	"internal/sandboxflag": 10,

	"cmd/stockade": 11, "cmd/stockade-node": 11, "cmd/warden": 11, "cmd/egress": 11, "helpers/internal/gen": 11,

	// Test support and the integration suite sit above everything
	// (internal/testutil's fixture opens a runtime on the Fake: it imports
	// the root). A package's tests may import any of them: the walk skips
	// _test.go files.
	"internal/testenv": 12, "internal/testutil": 12, "internal/dockertest": 12, "internal/faultproxy": 12,
	"internal/layers": 12, "internal/kubecluster": 12, "internal/inspecttest": 12, "internal/journaltest": 12,
	"internal/metricstest": 12, "internal/otlptest": 12,

	// The suites against the real daemon (test/...) share test/testkit.
	"test/testkit": 13, "internal/kubecluster/cmd/kubecluster": 13,

	"test": 14, "test/api": 14, "test/recovery": 14, "test/dockerio": 14, "test/warden": 14, "test/checkpoint": 14,
	"test/egress": 14, "test/pool": 14, "test/serve": 14, "test/cli": 14, "test/install": 14, "test/drill": 14,
	"test/hostile": 14, "test/faults": 14, "test/kube": 14, "test/bench": 14, "test/load": 14, "test/soak": 14, "test/mcp": 14,
}

// only lists packages whose imports are closed further: the programs copied
// into sandboxes, the two seams that must not know of each other, and the
// readers that must not link a runtime.
var only = map[string]func(imp string) bool{
	// The warden runs inside the sandbox: its library, its wire format,
	// the standard library and x/sys, nothing else.
	"cmd/warden": func(imp string) bool {
		return imp == module+"/warden" || stdlib(imp) || strings.HasPrefix(imp, "golang.org/x/sys/")
	},
	"warden": func(imp string) bool {
		return imp == module+"/warden/wire" || stdlib(imp) || strings.HasPrefix(imp, "golang.org/x/sys/")
	},
	"warden/wire": stdlib,
	"journal": func(imp string) bool {
		return !strings.HasPrefix(imp, "github.com/docker/") && imp != module+"/dockerio"
	},
	"dockerio": func(imp string) bool { return imp != module+"/journal" && !strings.HasPrefix(imp, "go.etcd.io/bbolt") },
	// The egress proxy runs in its own container: its rules package, spec,
	// the standard library and x/sys.
	"cmd/egress": func(imp string) bool {
		return stdlib(imp) || imp == module+"/egress" || imp == module+"/spec" || strings.HasPrefix(imp, "golang.org/x/sys/")
	},
	// A program that only talks to a server links no runtime: not the
	// journal, not Docker, not the actors.
	"client": func(imp string) bool {
		return !runtimeDep(imp) && imp != module+"/journal" && imp != module+"/recorder"
	},
	// The MCP tools drive a host.Runtime (embedded or served): no runtime
	// of their own.
	"mcpserver": func(imp string) bool {
		return !runtimeDep(imp) && imp != module+"/journal" && imp != module+"/recorder"
	},
	// Offline reading needs the journal, never Docker or the actors.
	"inspect": func(imp string) bool { return !runtimeDep(imp) },
	// The drill's checks read a journal with no runtime on it.
	"internal/drillcheck": func(imp string) bool { return !runtimeDep(imp) },
	// A re-run drives any host.Runtime (embedded or served): it links no
	// runtime of its own.
	"rerun": func(imp string) bool { return !runtimeDep(imp) && imp != module+"/journal" },
	// The API's edges: the server, the node and its program reach the
	// runtime through the root (and spec, host, profile), never Docker's
	// adapter or the actors directly.
	"server":            apiEdge,
	"cmd/stockade":      apiEdge,
	"internal/pool":     apiEdge,
	"kubenode":          apiEdge,
	"cmd/stockade-node": apiEdge,
	// The store is files and hashes: no journal, no Docker.
	"checkpoint": func(imp string) bool {
		return stdlib(imp) || imp == module+"/spec" || imp == module+"/statedir" || strings.HasPrefix(imp, "golang.org/x/sys/")
	},
	"statedir": func(imp string) bool { return stdlib(imp) || imp == module+"/spec" },
	// The facade reaches the runtime through internal/core alone: no other
	// internal package, no actors.
	"": func(imp string) bool {
		return !strings.HasPrefix(imp, module+"/internal/") || imp == module+"/internal/core"
	},
}

// apiEdge: not dockerio, not the actors, not the runtime's core (the root
// is its one way in).
func apiEdge(imp string) bool {
	return imp != module+"/dockerio" && !strings.HasPrefix(imp, module+"/internal/actors") && imp != module+"/internal/core"
}

// stdlib reports whether imp is a standard-library package (no dot in its
// first element).
func stdlib(imp string) bool { return !strings.Contains(strings.Split(imp, "/")[0], ".") }

// runtimeDep reports whether imp is part of the live runtime: the root,
// the actors, Docker's seam and client, the actor system.
func runtimeDep(imp string) bool {
	return imp == module || imp == module+"/internal/core" || imp == module+"/dockerio" || strings.HasPrefix(imp, module+"/internal/actors") ||
		strings.HasPrefix(imp, "github.com/docker/") || strings.HasPrefix(imp, "github.com/asynkron/")
}

// TestImportsPointDown: every package's non-test imports of this module
// point to a lower layer, and only internal/actors/ imports the actor system.
func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if pkg == "." {
			pkg = ""
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			imports[pkg][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("found %d packages under %s: the walk did not see the module", len(imports), root)
	}
	pkgs := slices.Sorted(func(yield func(string) bool) {
		for p := range imports {
			if !yield(p) {
				return
			}
		}
	})
	for _, pkg := range pkgs {
		r, ok := rank[pkg]
		if !ok {
			t.Errorf("package %q has no layer: place it in the rank table (and in docs/design.md)", "./"+pkg)
			continue
		}
		for imp := range imports[pkg] {
			if keep := only[pkg]; keep != nil && !keep(imp) {
				t.Errorf("./%s imports %s, which its seam forbids", pkg, imp)
			}
			if strings.HasPrefix(imp, "github.com/asynkron/protoactor-go") && pkg != "internal/actors" && !strings.HasPrefix(pkg, "internal/actors/") {
				t.Errorf("./%s imports the actor system (%s): only internal/actors/ may", pkg, imp)
			}
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			dr, ok := rank[dep]
			if !ok {
				continue // reported as the package it is
			}
			if dr >= r {
				t.Errorf("./%s (layer %d) imports ./%s (layer %d): imports point down only", pkg, r, dep, dr)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s is not the module root: %v", root, err)
	}
}

// TestDocsListEveryPackage: the layout block of docs/design.md and of the
// README gives every package of the module a line of its own (the path
// first, ending in "/"), and names none that is gone. The suites under
// test/ are mapped by test/doc.go instead; tools/kube/ is a module of its
// own.
func TestDocsListEveryPackage(t *testing.T) {
	for _, doc := range []struct{ path, heading string }{
		{"docs/design.md", "## Layout and direction of imports\n"},
		{"README.md", "## Layout\n"},
	} {
		b, err := os.ReadFile(filepath.Join("../..", doc.path))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		at := strings.Index(text, doc.heading)
		if at < 0 {
			t.Fatalf("%s has no %q section", doc.path, strings.TrimSpace(doc.heading))
		}
		block := text[at:]
		open := strings.Index(block, "```\n")
		block = block[open+4:]
		block = block[:strings.Index(block, "```")]
		listed := map[string]bool{}
		for line := range strings.Lines(block) {
			if line == "" || line[0] == ' ' {
				continue // a description's continuation
			}
			first := strings.Fields(line)[0]
			if pkg, ok := strings.CutSuffix(first, "/"); ok {
				listed[pkg] = true
			}
		}
		for pkg := range rank {
			if pkg == "" || pkg == "test" || strings.HasPrefix(pkg, "test/") && pkg != "test/testkit" {
				continue // the root is the document's subject; test/'s suites are mapped by test/doc.go
			}
			if !listed[pkg] {
				t.Errorf("%s's layout gives package %s/ no line of its own", doc.path, pkg)
			}
		}
		for pkg := range listed {
			if _, ok := rank[pkg]; !ok && pkg != "test" && pkg != "tools/kube" {
				t.Errorf("%s's layout lists %s/, which is no package of the module (gone, or misspelt)", doc.path, pkg)
			}
		}
	}
}

// TestDesignDrawsTheRanks: docs/design.md's drawing of the layers (the
// block after "Imports point down only") puts every package at its rank in
// the table, and names no other.
func TestDesignDrawsTheRanks(t *testing.T) {
	b, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	at := strings.Index(text, "Imports point down only")
	if at < 0 {
		t.Fatal(`docs/design.md has no "Imports point down only" drawing`)
	}
	fence := strings.Index(text[at:], "```\n")
	if fence < 0 {
		t.Fatal("docs/design.md's drawing of the layers is not in a code block")
	}
	body := text[at+fence+4:]
	body = body[:strings.Index(body, "```")]
	drawn := map[string]int{}
	r := -1
	for line := range strings.Lines(body) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if n, err := strconv.Atoi(fields[0]); err == nil {
			r, fields = n, fields[1:]
		}
		if r < 0 {
			t.Fatalf("the drawing's first line %q has no rank", line)
		}
		for _, pkg := range fields {
			if pkg == "stockade" {
				pkg = ""
			}
			if prev, dup := drawn[pkg]; dup {
				t.Errorf("docs/design.md draws %q twice (ranks %d and %d)", pkg, prev, r)
			}
			drawn[pkg] = r
		}
	}
	for pkg, want := range rank {
		got, ok := drawn[pkg]
		switch {
		case !ok:
			t.Errorf("docs/design.md's drawing leaves out %q (rank %d)", "./"+pkg, want)
		case got != want:
			t.Errorf("docs/design.md draws %q at rank %d; the table says %d", "./"+pkg, got, want)
		}
	}
	for pkg := range drawn {
		if _, ok := rank[pkg]; !ok {
			t.Errorf("docs/design.md draws %q, which the table does not rank (gone, or misspelt)", pkg)
		}
	}
}
