package failpoint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// declared returns every string constant declared in failpoint.go but Env
// (the variable's name, not a point), by name, read from the source: a
// point declared but left out of All is one `stockade drill` never kills at.
func declared(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "failpoint.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if name.Name == "Env" || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("failpoint %s is not a string literal: the scan cannot read it", name.Name)
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out[name.Name] = v
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no failpoint declaration found in failpoint.go")
	}
	return out
}

func TestAllListsEveryDeclaredFailpoint(t *testing.T) {
	decl := declared(t)
	values := map[string]string{}
	for name, v := range decl {
		if other, dup := values[v]; dup {
			t.Errorf("failpoints %s and %s share the name %q", other, name, v)
		}
		values[v] = name
		if !slices.Contains(All, v) {
			t.Errorf("failpoint %s (%q) is declared but not in All: stockade drill never kills there", name, v)
		}
	}
	seen := map[string]bool{}
	for _, v := range All {
		if _, ok := values[v]; !ok {
			t.Errorf("All holds %q, which no constant of failpoint.go declares", v)
		}
		if seen[v] {
			t.Errorf("All lists %q twice", v)
		}
		seen[v] = true
	}
}
