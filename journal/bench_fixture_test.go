package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// Benchmark fixtures are written straight into bbolt in big transactions
// (not through durable appends), built once per test binary run and removed
// by TestMain. Set STOCKADE_BENCH_DIR to put them (and the benchmark
// journals) on a particular disk; the default is os.TempDir().

var (
	fixtureMu   sync.Mutex
	fixtureRoot string
	fixtures    = map[string]string{}
)

func benchDir(tb testing.TB) string {
	tb.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if fixtureRoot == "" {
		d, err := os.MkdirTemp(os.Getenv("STOCKADE_BENCH_DIR"), "stockade-journal-bench-")
		if err != nil {
			tb.Fatal(err)
		}
		fixtureRoot = d
	}
	return fixtureRoot
}

func removeFixtures() {
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if fixtureRoot != "" {
		_ = os.RemoveAll(fixtureRoot)
	}
}

// fixture returns the path of the named fixture, building it on first use.
func fixture(tb testing.TB, name string, build func(db *bbolt.DB) error) string {
	tb.Helper()
	dir := benchDir(tb)
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if p, ok := fixtures[name]; ok {
		return p
	}
	p := filepath.Join(dir, name+".db")
	j, err := Open(p, Options{}) // meta and buckets
	if err != nil {
		tb.Fatal(err)
	}
	if err := j.Close(); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	// Fixture only: no fsync per commit or growth, one synced flush at the end.
	db, err := bbolt.Open(p, 0o600, &bbolt.Options{NoSync: true, NoGrowSync: true,
		InitialMmapSize: 1 << 30, FreelistType: bbolt.FreelistMapType})
	if err != nil {
		tb.Fatal(err)
	}
	if err := build(db); err != nil {
		tb.Fatal(err)
	}
	if err := db.Sync(); err != nil {
		tb.Fatal(err)
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	fi, _ := os.Stat(p)
	tb.Logf("fixture %s: %d MB built in %s", name, fi.Size()>>20, time.Since(start).Round(time.Millisecond))
	fixtures[name] = p
	return p
}

// benchPayload is a typical small event payload (65 bytes).
var benchPayload = []byte(`{"argv":["python3","-c","print(1)"],"stdout":"pipe","timeout":30}`)

// putEvents writes events n..n+count-1 of key (with seq n.. ) in tx.
func putEvents(tx *bbolt.Tx, k Key, parent string, types []string, terminalLast bool, at int64) error {
	kb := tx.Bucket(bucketStreams).Bucket([]byte(k.Kind))
	kb.FillPercent = 1 // fixture ids are written in order
	sb, err := kb.CreateBucketIfNotExists([]byte(k.ID))
	if err != nil {
		return err
	}
	sb.FillPercent = 1
	last, _ := sb.Cursor().Last()
	seq := uint64(0)
	if last != nil {
		seq = seqFromKey(last)
	}
	for i, typ := range types {
		seq++
		term := terminalLast && i == len(types)-1
		if err := sb.Put(seqKey(seq), appendEnvelope(nil, typ, term, at, benchPayload)); err != nil {
			return err
		}
	}
	if terminalLast {
		tx.Bucket(bucketTerminal).FillPercent = 1
		return tx.Bucket(bucketTerminal).Put(terminalKey(at, k), nil)
	}
	le := LiveEntity{Parent: parent, LastSeq: seq, Type: types[len(types)-1], Updated: unixTime(at)}
	tx.Bucket(bucketLive).FillPercent = 1
	return tx.Bucket(bucketLive).Put(liveKey(k), encodeLive(le))
}

// replayFixture: one process stream of 1,000,000 events.
func replayFixture(tb testing.TB) (string, Key) {
	k := Key{Kind: KindProcess, ID: "replay"}
	return fixture(tb, "replay-1m", func(db *bbolt.DB) error {
		types := make([]string, 100_000)
		for i := range types {
			types[i] = "process.output"
		}
		for range 10 {
			if err := db.Update(func(tx *bbolt.Tx) error {
				return putEvents(tx, k, "sb", types, false, time.Now().UnixNano())
			}); err != nil {
				return err
			}
		}
		return nil
	}), k
}

// entitiesFixture: terminal sandboxes (4 events each: reserved, started,
// exited, removed) and processes (3: reserved, started, exited), plus live
// sandboxes with one live process each, half of the live count each.
func entitiesFixture(tb testing.TB, terminal, live int) string {
	return fixture(tb, fmt.Sprintf("entities-%d-%d", terminal, live), func(db *bbolt.DB) error {
		at := time.Now().Add(-time.Hour).UnixNano()
		const per = 10_000
		for base := 0; base < terminal; base += per {
			err := db.Update(func(tx *bbolt.Tx) error {
				for i := base; i < min(base+per, terminal); i++ {
					var err error
					if i%2 == 0 {
						err = putEvents(tx, Key{KindSandbox, fmt.Sprintf("t%07d", i)}, "",
							[]string{"sandbox.reserved", "sandbox.started", "sandbox.exited", "sandbox.removed"}, true, at)
					} else {
						err = putEvents(tx, Key{KindProcess, fmt.Sprintf("t%07d", i)}, fmt.Sprintf("t%07d", i-1),
							[]string{"process.reserved", "process.started", "process.exited"}, true, at)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return db.Update(func(tx *bbolt.Tx) error {
			for i := range live / 2 {
				s := fmt.Sprintf("l%07d", i)
				if err := putEvents(tx, Key{KindSandbox, s}, "", []string{"sandbox.reserved", "sandbox.started"}, false, at); err != nil {
					return err
				}
				if err := putEvents(tx, Key{KindProcess, s + "p"}, s, []string{"process.reserved", "process.started"}, false, at); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
