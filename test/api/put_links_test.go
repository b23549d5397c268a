package api

import (
	"archive/tar"
	"context"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestAPIPutRefusesEscapingLinks is TestDockerioPutRefusesEscapingLinks
// through the embedding API.
func TestAPIPutRefusesEscapingLinks(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range testkit.EscapingLinks {
		t.Run(tc.Name, func(t *testing.T) {
			err := sb.Put(ctx, "work", testkit.TarOf(t, testkit.TarEntry{Type: tar.TypeReg, Name: "good", Body: "good\n"}, testkit.TarEntry{Type: tar.TypeSymlink, Name: "here", Link: "."}, tc.Bad))
			if !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("got %v, want invalid_argument", err)
			}
			if _, _, err := sb.Get(ctx, "work/good", false); !spec.IsCode(err, spec.CodeNotFound) {
				t.Fatalf("work/good was extracted from a refused archive: %v", err)
			}
		})
	}
	if err := sb.Put(ctx, "work", testkit.TarOf(t, testkit.TarEntry{Type: tar.TypeReg, Name: "..foo", Body: "dots\n"})); err != nil {
		t.Fatal(err)
	}
	rc, _, err := sb.Get(ctx, "work/..foo", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := testkit.ReadTar(t, rc); got != "dots\n" {
		t.Fatalf("..foo holds %q", got)
	}
}
