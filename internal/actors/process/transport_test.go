package process

import (
	"errors"
	"testing"

	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/warden/link"
)

// TestNewTransport: a process is run by its sandbox's warden when the
// sandbox has a link; a recovering one by the transport that started it
// (the journal's warden flag), and one that never got an exec by the
// warden if the sandbox had one (even one that is gone).
func TestNewTransport(t *testing.T) {
	link := &link.Link{}
	gone := errors.New("the warden is gone")
	tests := []struct {
		name       string
		p          Params
		wantWarden bool
	}{
		{"no link", Params{}, false},
		{"a link", Params{Link: link}, true},
		{"recovering exec", Params{Adopt: &lifecycle.Process{ExecID: "e1"}}, false},
		{"recovering exec, a link now", Params{Link: link, Adopt: &lifecycle.Process{ExecID: "e1"}}, false},
		{"recovering warden process", Params{Link: link, Adopt: &lifecycle.Process{ByWarden: true}}, true},
		{"recovering warden process, warden gone", Params{WardenGone: gone, Adopt: &lifecycle.Process{ByWarden: true}}, true},
		{"recovering, no exec, a link", Params{Link: link, Adopt: &lifecycle.Process{}}, true},
		{"recovering, no exec, warden gone", Params{WardenGone: gone, Adopt: &lifecycle.Process{}}, true},
		{"recovering, no exec, no warden", Params{Adopt: &lifecycle.Process{}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &processActor{p: tc.p}
			tr := a.newTransport()
			w, isWarden := tr.(*wardenTransport)
			if isWarden != tc.wantWarden {
				t.Fatalf("transport %T, want warden %v", tr, tc.wantWarden)
			}
			if isWarden && w.link != tc.p.Link {
				t.Fatalf("the warden transport's link is not the sandbox's")
			}
		})
	}
}
