package inspect_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/internal/journaltest"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestFollowSandbox: a sandbox's past, then its own new events and its new
// processes' as they are appended, each once, in order; another sandbox's
// events and its processes' are not given.
func TestFollowSandbox(t *testing.T) {
	j := writeJournal(t, story)
	pc := journal.Key{Kind: journal.KindProcess, ID: "pc"}
	pd := journal.Key{Kind: journal.KindProcess, ID: "pd"}
	added := []step{
		{sbA, lifecycle.SandboxRemoving{}},
		{prB, lifecycle.ProcessStarted{Group: 9}},
		{pc, lifecycle.ProcessReserved{Sandbox: "sba", Spec: spec.Process{Argv: []string{"true"}}}},
		{pd, lifecycle.ProcessReserved{Sandbox: "sbb", Spec: spec.Process{Argv: []string{"true"}}}},
		{pc, lifecycle.ExecCreated{ExecID: "x2"}},
		{sbB, lifecycle.SandboxStopping{Reason: lifecycle.ReasonStopped}},
	}
	want := []string{
		"sandbox sbb #1 sandbox.reserved", "sandbox sbb #2 sandbox.created", "sandbox sbb #3 sandbox.started",
		"process pb #1 process.reserved", "process pb #2 process.exec_created",
		"process pb #3 process.started", "process pd #1 process.reserved", "sandbox sbb #4 sandbox.stopping",
	}
	const past = 5
	stop := errors.New("seen enough")
	pastGiven := make(chan struct{})
	done := make(chan error, 1)
	var got []string
	go func() {
		done <- inspect.New(j).Follow(t.Context(), "sbb", func(e host.HistoryEvent) error {
			got = append(got, line(e))
			if len(got) == past {
				close(pastGiven) // it subscribed before it read the past
			}
			if len(got) == len(want) {
				return stop
			}
			return nil
		})
	}()
	select {
	case <-pastGiven:
	case err := <-done:
		t.Fatalf("Follow ended before the past was given: %v (%d events)", err, len(got))
	}
	for _, s := range added {
		journaltest.Append(t, j, s.k, s.ev)
	}
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("Follow: %v, want the callback's error", err)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("followed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestFollowTail: with no sandbox, no past is given, and from the first
// event given on, every appended event follows once and in order.
func TestFollowTail(t *testing.T) {
	j := writeJournal(t, story)
	stop := errors.New("seen enough")
	const wanted = 20
	var got []uint64
	done := make(chan error, 1)
	go func() {
		done <- inspect.New(j).Follow(t.Context(), "", func(e host.HistoryEvent) error {
			if e.Kind != "process" || e.ID != "tail" {
				return errors.New("a past or foreign event was given: " + line(e))
			}
			got = append(got, e.Seq)
			if len(got) == wanted {
				return stop
			}
			return nil
		})
	}()
	// The follower subscribes at some point during these appends: it is
	// given what came after, whatever that point was.
	k := journal.Key{Kind: journal.KindProcess, ID: "tail"}
	journaltest.Append(t, j, k, lifecycle.ProcessReserved{Sandbox: "sbb", Spec: spec.Process{Argv: []string{"true"}}})
	var err error
	for appended := false; !appended; {
		select {
		case err = <-done:
			appended = true
		default:
			journaltest.Append(t, j, k, lifecycle.ProcessStopping{})
		}
	}
	if !errors.Is(err, stop) {
		t.Fatalf("Follow: %v, want the callback's error", err)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("sequences given %v: each once and in order, none missed", got)
		}
	}
}

// TestFollowClosedJournal: the journal closing ends a follow with
// journal.ErrClosed, whether it closed before the follow subscribed or
// after.
func TestFollowClosedJournal(t *testing.T) {
	j := writeJournal(t, story)
	done := make(chan error, 1)
	go func() {
		done <- inspect.New(j).Follow(context.Background(), "", func(host.HistoryEvent) error { return nil })
	}()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("Follow as its journal closed: %v, want journal.ErrClosed", err)
	}
}
