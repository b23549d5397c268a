package statedir_test

import (
	"errors"
	"testing"

	"github.com/stockade/stockade/statedir"
)

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		journal, rec, ckpt, sock, helpers string
	}{
		{"/s/journal.db", "/s/journal.rec", "/s/journal.checkpoints", "/s/journal.sock", "/s/helpers"},
		{"/s/j", "/s/j.rec", "/s/j.checkpoints", "/s/j.sock", "/s/helpers"},
		{"rel/a.b.db", "rel/a.b.rec", "rel/a.b.checkpoints", "rel/a.b.sock", "rel/helpers"},
	} {
		got := [4]string{statedir.Recordings(tc.journal), statedir.Checkpoints(tc.journal), statedir.Socket(tc.journal), statedir.Helpers(tc.journal)}
		want := [4]string{tc.rec, tc.ckpt, tc.sock, tc.helpers}
		if got != want {
			t.Errorf("layout of %s: %q, want %q", tc.journal, got, want)
		}
	}
}

func TestDefaultJournal(t *testing.T) {
	for _, tc := range []struct {
		name, journal, xdg, home, want string
		err                            error
	}{
		{name: "the variable wins", journal: "/x/j.db", xdg: "/state", home: "/h", want: "/x/j.db"},
		{name: "XDG_STATE_HOME when absolute", xdg: "/state", home: "/h", want: "/state/stockade/journal.db"},
		{name: "a relative XDG_STATE_HOME is ignored", xdg: "state", home: "/h", want: "/h/.local/state/stockade/journal.db"},
		{name: "no home", err: statedir.ErrNoHome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(statedir.JournalEnv, tc.journal)
			t.Setenv("XDG_STATE_HOME", tc.xdg)
			t.Setenv("HOME", tc.home)
			got, err := statedir.DefaultJournal()
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("DefaultJournal: %q, %v; want %v", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("DefaultJournal: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestServedSocket(t *testing.T) {
	for _, tc := range []struct{ name, socket, journal, arg, want string }{
		{name: "the variable wins", socket: "/run/s.sock", journal: "/j/journal.db", arg: "/a/b.db", want: "/run/s.sock"},
		{name: "beside the journal named", arg: "/a/b.db", want: "/a/b.sock"},
		{name: "beside the default journal", journal: "/j/journal.db", want: "/j/journal.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(statedir.SocketEnv, tc.socket)
			t.Setenv(statedir.JournalEnv, tc.journal)
			got, err := statedir.ServedSocket(tc.arg)
			if err != nil || got != tc.want {
				t.Fatalf("ServedSocket(%q): %q, %v; want %q", tc.arg, got, err, tc.want)
			}
		})
	}
}
