package test

import (
	"context"
	"strings"
	"testing"
)

func TestDockerioLifecycle(t *testing.T) {
	e := newDio(t)
	sb := e.sandbox(t, nil)
	if got := e.sh(t, sb, "id"); !strings.HasPrefix(got, "uid=65532") {
		t.Fatalf("id: %q", got)
	}
	if err := e.a.RemoveSandbox(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	if rs := e.leftovers(t); len(rs) != 0 {
		t.Fatalf("left behind: %+v", rs)
	}
}
