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
// lower rank. A new package must be placed here; the test names it if not.
var rank = map[string]int{
	"spec": 0,
	"api":  0, "api/stockade/v1": 0,
	"internal/failpoint": 0,

	"framing": 1, "warden": 1, "lifecycle": 1, "journal": 1, "egress": 1,

	"recorder": 2, "host": 2, "dockerio": 2, "helpers": 2, "helpers/internal/manifest": 0,

	"dockerio/enginetest": 3, "inspect": 3, "client": 3, "actors": 3,

	"actors/process": 4,
	"actors/sandbox": 5,
	"":               6, // the root package: the embedded API
	"server":         7,

	"cmd/stockade": 8, "cmd/warden": 8, "cmd/egress": 8, "helpers/internal/gen": 8,

	// Test support and the integration suite sit above everything.
	"internal/testenv": 9, "internal/dockertest": 9, "internal/faultproxy": 9,
	"internal/layers": 9, "test": 10,
}

// only lists packages whose imports are closed further: a program copied
// into every sandbox, and the two seams that must not know of each other.
var only = map[string]func(imp string) bool{
	// The warden runs inside the sandbox: its own protocol, the standard
	// library and x/sys, nothing else.
	"cmd/warden": func(imp string) bool {
		return imp == module+"/warden" || !strings.Contains(strings.Split(imp, "/")[0], ".") || strings.HasPrefix(imp, "golang.org/x/sys/")
	},
	"journal": func(imp string) bool {
		return !strings.HasPrefix(imp, "github.com/docker/") && imp != module+"/dockerio"
	},
	"dockerio": func(imp string) bool { return imp != module+"/journal" && !strings.HasPrefix(imp, "go.etcd.io/bbolt") },
}

// TestImportsPointDown: every package's non-test imports of this module
// point to a lower layer, and only actors/ imports the actor system.
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
			if strings.HasPrefix(imp, "github.com/asynkron/protoactor-go") && pkg != "actors" && !strings.HasPrefix(pkg, "actors/") {
				t.Errorf("./%s imports the actor system (%s): only actors/ may", pkg, imp)
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
