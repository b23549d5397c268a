package inspect_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// A journal file no runtime holds is read with Open; the same calls work
// on a served runtime's client and on an embedded Runtime (host.Inspector).
func Example() {
	dir, err := os.MkdirTemp("", "inspect-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "journal.db")
	writeExampleJournal(path)

	ctx := context.Background()
	r, err := inspect.Open(path) // read-only; journal_locked while a runtime holds it
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = r.Close() }() // only read
	h, _ := r.History(ctx, "sb1")
	for _, e := range h {
		fmt.Println(e.Seq, e.Type)
	}
	st, _ := r.ReplaySandbox(ctx, "sb1", 2)
	fmt.Println("at 2:", st.Phase)
	changes, _ := inspect.Diff(ctx, r, "sb1", false, 2, 3)
	for _, c := range changes {
		if c.Field == "Phase" {
			fmt.Println(c.Field, c.From, "→", c.To)
		}
	}
	fmt.Println("verify:", r.Verify(ctx))
	// Output:
	// 1 sandbox.reserved
	// 2 sandbox.created
	// 3 sandbox.started
	// at 2: reserved
	// Phase reserved → started
	// verify: <nil>
}

func writeExampleJournal(path string) {
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		panic(err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			panic(err)
		}
	}()
	k := journal.Key{Kind: journal.KindSandbox, ID: "sb1"}
	for _, ev := range []lifecycle.Event{
		lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Lifetime: spec.Kept}},
		lifecycle.SandboxCreated{Workload: "w"},
		lifecycle.SandboxStarted{},
	} {
		typ, payload, _ := lifecycle.Encode(ev)
		if _, err := j.Append(context.Background(), journal.Record{Key: k, Type: typ, Payload: payload}); err != nil {
			panic(err)
		}
	}
}
