package journal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// Run: go test -run '^$' -bench . -benchtime 1s ./journal
// (fixtures: 1M events and 100k entities, built once per run in a few seconds).

func benchJournal(b *testing.B) *Journal {
	b.Helper()
	p := filepath.Join(benchDir(b), fmt.Sprintf("append-%d.db", time.Now().UnixNano()))
	j, err := Open(p, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := j.Close(); err != nil {
			b.Error(err)
		}
		_ = os.Remove(p)
	})
	return j
}

// BenchmarkAppendLatency: one appender, one durable Append per op (one bbolt
// commit: two fdatasyncs). Reports p50 and p99 beside the mean.
func BenchmarkAppendLatency(b *testing.B) {
	j := benchJournal(b)
	ctx := context.Background()
	k := Key{Kind: KindSandbox, ID: "lat"}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := j.Append(ctx, Record{Key: k, Type: "sandbox.event", Payload: benchPayload}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

var appendRates sync.Map // "workload/appenders" -> appends/s of the last run

// BenchmarkAppendThroughput: N concurrent appenders, b.N durable appends in
// all. Reports appends/s, appends per commit, and for 8 and 64 appenders the
// ratio to the single-appender rate of the same run. Two workloads:
//
//   - lifecycle: each appender runs process entities of 6 events (the last
//     terminal), then starts a new one: the journal's real shape, where
//     streams are short and mostly inline in their kind bucket.
//   - long: each appender appends forever to one stream, so every commit
//     rewrites a leaf and a branch page per appender: the worst case for
//     pages written per commit.
func BenchmarkAppendThroughput(b *testing.B) {
	for _, w := range []string{"lifecycle", "long"} {
		for _, n := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/appenders=%d", w, n), func(b *testing.B) {
				benchThroughput(b, w, n)
			})
		}
	}
}

func benchThroughput(b *testing.B, workload string, n int) {
	j := benchJournal(b)
	ctx := context.Background()
	commits0 := j.commits.Load()
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range n {
		ops := b.N / n
		if g < b.N%n {
			ops++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := Key{Kind: KindProcess, ID: fmt.Sprint("p", g)}
			for i := range ops {
				if workload == "lifecycle" && i%6 == 0 {
					// Real entity ids, as the runtime makes them.
					id, err := NewID()
					if err != nil {
						b.Error(err)
						return
					}
					k.ID = id
				}
				r := Record{Key: k, Parent: "sb", Type: "process.event", Payload: benchPayload}
				if workload == "lifecycle" && (i%6 == 5 || i == ops-1) {
					r.Terminal = true
				}
				if _, err := j.Append(ctx, r); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	rate := float64(b.N) / el.Seconds()
	appendRates.Store(fmt.Sprint(workload, "/", n), rate)
	b.ReportMetric(rate, "appends/s")
	b.ReportMetric(float64(b.N)/float64(j.commits.Load()-commits0), "appends/commit")
	if r1, ok := appendRates.Load(workload + "/1"); ok && n > 1 {
		b.ReportMetric(rate/r1.(float64), "x-vs-1")
	}
}

// BenchmarkBoltUpdatePerEvent is the anchor: a plain bbolt Update per event
// (same file options, same payload, default durability), one writer.
func BenchmarkBoltUpdatePerEvent(b *testing.B) {
	p := filepath.Join(benchDir(b), fmt.Sprintf("bolt-%d.db", time.Now().UnixNano()))
	db, err := bbolt.Open(p, 0o600, &bbolt.Options{FreelistType: bbolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := db.Close(); err != nil {
			b.Error(err)
		}
		_ = os.Remove(p)
	})
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("events")); return err }); err != nil {
		b.Fatal(err)
	}
	env := appendEnvelope(nil, "sandbox.event", false, time.Now().UnixNano(), benchPayload)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		err := db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket([]byte("events")).Put(seqKey(uint64(i+1)), env)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkReplay: Read over a 1,000,000-event stream: cursor scan, envelope
// decode (checksum included), Event built, callback. One op = the whole
// stream.
func BenchmarkReplay(b *testing.B) {
	path, k := replayFixture(b)
	j, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			b.Error(err)
		}
	}()
	b.ResetTimer()
	var n int
	for i := 0; i < b.N; i++ {
		n = 0
		err := j.Read(k, 0, 0, func(e Event) error {
			n++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n != 1_000_000 {
		b.Fatalf("replayed %d events", n)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReplayRawScan: the same keys with a bare bbolt cursor (no decode,
// no copy): the ceiling for BenchmarkReplay.
func BenchmarkReplayRawScan(b *testing.B) {
	path, k := replayFixture(b)
	j, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			b.Error(err)
		}
	}()
	b.ResetTimer()
	var n, bytes int
	for i := 0; i < b.N; i++ {
		n, bytes = 0, 0
		err := j.db.View(func(tx *bbolt.Tx) error {
			c := streamBucket(tx, k).Cursor()
			for kk, v := c.First(); kk != nil; kk, v = c.Next() {
				n++
				bytes += len(v)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n != 1_000_000 {
		b.Fatalf("scanned %d events", n)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkOpenToReady: writable Open, then what start-up reads: the live
// index and every live entity's stream. With 100,000 terminal + 100 live
// entities vs 100 live only; the index makes them alike.
func BenchmarkOpenToReady(b *testing.B) {
	var only float64
	for _, tc := range []struct {
		name           string
		terminal, live int
	}{
		{"live=100", 0, 100},
		{"terminal=100000,live=100", 100_000, 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			path := entitiesFixture(b, tc.terminal, tc.live)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j, err := Open(path, Options{})
				if err != nil {
					b.Fatal(err)
				}
				var live []LiveEntity
				if err := j.Live(func(e LiveEntity) error { live = append(live, e); return nil }); err != nil {
					b.Fatal(err)
				}
				events := 0
				for _, e := range live {
					if err := j.Read(e.Key, 0, 0, func(Event) error { events++; return nil }); err != nil {
						b.Fatal(err)
					}
				}
				if len(live) != tc.live || events != 2*tc.live {
					b.Fatalf("%d live, %d events", len(live), events)
				}
				b.StopTimer()
				if err := j.Close(); err != nil {
					b.Error(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if tc.terminal == 0 {
				only = per
			} else if only > 0 {
				b.ReportMetric(per/only, "x-vs-live-only")
			}
		})
	}
}
