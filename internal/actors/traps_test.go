package actors_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// forbidden lists protoactor-go APIs docs/design.md rules out, with the reason.
// Where a trap could only be shown by waiting (hard-coded timeouts) or by a
// rare race, this static check is the test.
var forbidden = map[string]string{
	"ReenterAfter":        "its continuation runs on the old instance after a restart",
	"SetReceiveTimeout":   "data race under -race (upstream #1139); use time.AfterFunc with a generation",
	"PoisonFuture":        "hard-coded 10 s timeout",
	"StopFuture":          "hard-coded 10 s timeout",
	"RequestFuture":       "one waiter per future; requests carry a reply channel instead",
	"Bounded":             "a Bounded mailbox blocks its sender",
	"BoundedDropping":     "drops messages silently",
	"NewBoundedMailbox":   "a bounded mailbox blocks its sender",
	"PoisonFutureAndWait": "hard-coded 10 s timeout",
}

// files returns every non-test Go file of the module.
func files(t *testing.T) map[string]*ast.File {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]*ast.File{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNoForbiddenProtoactorAPIs(t *testing.T) {
	for path, f := range files(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if why, bad := forbidden[sel.Sel.Name]; bad {
					t.Errorf("%s uses %s: %s", path, sel.Sel.Name, why)
				}
			}
			return true
		})
	}
}

// TestOnlyActorsImportProtoactor: the import direction of docs/design.md. The
// journal is ours (never persistence.Mixin), and nothing outside actors/
// links the actor system.
func TestOnlyActorsImportProtoactor(t *testing.T) {
	for path, f := range files(t) {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, "github.com/asynkron/protoactor-go") {
				continue
			}
			if strings.Contains(p, "/persistence") {
				t.Errorf("%s imports %s: a failed fsync would pass silently", path, p)
			}
			if !strings.HasPrefix(path, "actors/") {
				t.Errorf("%s imports %s: only actors/ may", path, p)
			}
		}
	}
}

// TestFoldsAndStoresStayActorFree: replay tools must not link the actor
// system, and dockerio/journal must not know each other.
func TestFoldsAndStoresStayActorFree(t *testing.T) {
	rules := map[string][]string{
		"lifecycle/": {"github.com/stockade/stockade/internal/actors", "github.com/stockade/stockade/journal", "github.com/stockade/stockade/dockerio"},
		"journal/":   {"github.com/stockade/stockade/dockerio", "github.com/stockade/stockade/internal/actors", "github.com/docker/"},
		"dockerio/":  {"github.com/stockade/stockade/journal", "github.com/stockade/stockade/internal/actors"},
		"framing/":   {"github.com/stockade/stockade/journal", "github.com/stockade/stockade/internal/actors", "github.com/stockade/stockade/dockerio"},
		"spec/":      {"github.com/stockade/stockade/", "github.com/docker/", "github.com/asynkron/"},
	}
	for path, f := range files(t) {
		for dir, banned := range rules {
			if !strings.HasPrefix(path, dir) {
				continue
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range banned {
					if strings.HasPrefix(p, b) {
						t.Errorf("%s imports %s", path, p)
					}
				}
			}
		}
	}
}
