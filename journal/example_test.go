package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stockade/stockade/journal"
)

func Example() {
	dir, _ := os.MkdirTemp("", "journal-example")
	defer func() { _ = os.RemoveAll(dir) }()
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = j.Close() }()
	ctx := context.Background()
	sb := journal.Key{Kind: journal.KindSandbox, ID: "sb1"}
	p := journal.Key{Kind: journal.KindProcess, ID: "p1"}

	// Each Append is atomic and durable when it returns.
	for _, recs := range [][]journal.Record{
		{{Key: sb, Type: "sandbox.reserved", Payload: json.RawMessage(`{"image":"sha256:abc"}`)}},
		{{Key: p, Parent: "sb1", Type: "process.reserved"}},
		{
			{Key: p, Type: "process.exited", Payload: json.RawMessage(`{"code":0}`), Terminal: true},
			{Key: sb, Type: "sandbox.exited"},
		},
	} {
		if _, err := j.Append(ctx, recs...); err != nil {
			fmt.Println(err)
			return
		}
	}

	// Start-up reads the live index only: the exited process has left it.
	err = j.Live(func(e journal.LiveEntity) error {
		fmt.Println("live:", e.Key, "seq", e.LastSeq, e.Type)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Replay one entity.
	err = j.Read(p, 1, 0, func(e journal.Event) error {
		fmt.Println(e.Key, e.Seq, e.Type, string(e.Payload), e.Terminal)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// An ended stream takes no more events.
	_, err = j.Append(ctx, journal.Record{Key: p, Type: "process.started"})
	fmt.Println(err)
	// Output:
	// live: sandbox/sb1 seq 2 sandbox.exited
	// process/p1 1 process.reserved  false
	// process/p1 2 process.exited {"code":0} true
	// journal.append: invalid_argument: record 0: process/p1 ended at seq 2: journal: stream is terminal
}
