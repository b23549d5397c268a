package journal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The crash test re-executes the test binary as a child (TestMain switches on
// crashChildEnv) that appends from many goroutines and prints one line per
// acknowledged event:
//
//	<kind> <id> <seq>
//
// The parent SIGKILLs it at a random moment, reopens the journal and checks
// that every acknowledged event is there, in order, that every batch is whole
// and that Verify (checksums, gaps, indexes) passes. The next child continues
// in the same file: it first ends every entity the last one left live (as
// recovery does), so appends after a crash are exercised too.
const (
	crashChildEnv = "STOCKADE_JOURNAL_CRASH_CHILD"
	crashRunEnv   = "STOCKADE_JOURNAL_CRASH_RUN"
)

// crashPayload is what the child stores: n is the sequence the child expects
// (so order is checked), b names a two-record batch.
type crashPayload struct {
	N int    `json:"n"`
	B string `json:"b,omitempty"`
}

// crashChild runs in the child process and never returns normally.
func crashChild(path, run string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	j, err := Open(path, Options{LockTimeout: 10 * time.Second})
	if err != nil {
		fail(err)
	}
	var outMu sync.Mutex
	ack := func(evs []Event) {
		var sb strings.Builder
		for _, e := range evs {
			fmt.Fprintf(&sb, "%s %s %d\n", e.Key.Kind, e.Key.ID, e.Seq)
		}
		outMu.Lock()
		// One write: a pipe write this small is atomic.
		if _, err := os.Stdout.WriteString(sb.String()); err != nil {
			fail(err)
		}
		outMu.Unlock()
	}
	ctx := context.Background()
	payload := func(n int, b string) json.RawMessage {
		p, _ := json.Marshal(crashPayload{N: n, B: b})
		return p
	}
	// Recovery: end what the last child left live.
	var live []LiveEntity
	if err := j.Live(func(e LiveEntity) error { live = append(live, e); return nil }); err != nil {
		fail(err)
	}
	for _, e := range live {
		evs, err := j.Append(ctx, Record{Key: e.Key, Type: "recovered", Payload: payload(int(e.LastSeq)+1, ""), Terminal: true})
		if err != nil {
			fail(err)
		}
		ack(evs)
	}
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			type ent struct {
				key Key
				n   int
			}
			gen := 0
			newEnt := func(kind Kind) *ent {
				gen++
				return &ent{key: Key{Kind: kind, ID: fmt.Sprintf("r%s-g%d-%d", run, g, gen)}}
			}
			s, p := newEnt(KindSandbox), newEnt(KindProcess)
			rt := &ent{key: Key{Kind: KindRuntime, ID: "r" + run + "-" + strconv.Itoa(g)}}
			for batch := 0; ; batch++ {
				var recs []Record
				var ended []*ent
				add := func(e *ent, b string, terminal bool) {
					e.n++
					r := Record{Key: e.key, Type: "ev", Payload: payload(e.n, b), Terminal: terminal}
					if e.key.Kind == KindProcess {
						r.Parent = s.key.ID
					}
					recs = append(recs, r)
					if terminal {
						ended = append(ended, e)
					}
				}
				switch x := rng.IntN(10); {
				case x < 3:
					add(s, "", false)
				case x < 6:
					add(p, "", p.n > 2 && rng.IntN(4) == 0)
				case x < 9:
					b := fmt.Sprintf("r%s-g%d-b%d", run, g, batch)
					end := p.n > 2 && rng.IntN(3) == 0
					add(p, b, end)
					add(s, b, end && rng.IntN(3) == 0)
				default:
					add(rt, "", false)
				}
				evs, err := j.Append(ctx, recs...)
				if err != nil {
					fail(err)
				}
				ack(evs)
				for _, e := range ended {
					if e == s {
						s = newEnt(KindSandbox)
					}
					if e == p || e == s {
						p = newEnt(KindProcess)
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestCrash(t *testing.T) {
	iters, budget := 30, 20*time.Second
	if testing.Short() {
		iters, budget = 5, 5*time.Second
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[Key]uint64{} // highest acknowledged sequence per stream
	total := 0
	start := time.Now()
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := 0; i < iters && time.Since(start) < budget; i++ {
		lines := runCrashChild(t, path, i, time.Duration(5+rng.IntN(250))*time.Millisecond)
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 3 {
				t.Fatalf("run %d: bad line %q", i, l)
			}
			seq, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("run %d: bad line %q", i, l)
			}
			k := Key{Kind: Kind(f[0]), ID: f[1]}
			if seq > acked[k] {
				acked[k] = seq
			}
		}
		total += len(lines)
		checkCrashJournal(t, path, acked, i)
	}
	t.Logf("%d acknowledged events in %d streams; all present after every kill (%s)", total, len(acked), time.Since(start).Round(time.Millisecond))
}

// runCrashChild starts a child, lets it append for about d after its first
// acknowledgement, kills it and returns the lines it printed.
func runCrashChild(t *testing.T, path string, run int, d time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashRunEnv+"="+strconv.Itoa(run))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var lines []string
	done := make(chan error, 1)
	go func() {
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				// A partial last line cannot be an acknowledgement (it is
				// printed in one write after Append returned), so drop it.
				if err != io.EOF {
					done <- err
				}
				close(done)
				return
			}
			if len(lines) == 0 {
				close(first)
			}
			lines = append(lines, strings.TrimSuffix(l, "\n"))
		}
	}()
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("run %d: child printed nothing; stderr: %s", run, stderr.String())
	}
	time.Sleep(d)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("run %d: child ended by itself (%v); stderr: %s", run, werr, stderr.String())
	}
	return lines
}

func checkCrashJournal(t *testing.T, path string, acked map[Key]uint64, run int) {
	t.Helper()
	j, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("run %d: reopen after kill: %v", run, err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := j.Verify(); err != nil {
		t.Fatalf("run %d: %v", run, err)
	}
	batches := map[string]int{}
	stored := map[Key]uint64{}
	err = j.Streams(func(k Key) error {
		return j.Read(k, 0, 0, func(e Event) error {
			var p crashPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				return fmt.Errorf("%s seq %d: payload %q: %w", k, e.Seq, e.Payload, err)
			}
			if uint64(p.N) != e.Seq {
				return fmt.Errorf("%s seq %d holds the child's event %d: out of order", k, e.Seq, p.N)
			}
			if p.B != "" {
				batches[p.B]++
			}
			stored[k] = e.Seq
			return nil
		})
	})
	if err != nil {
		t.Fatalf("run %d: %v", run, err)
	}
	for k, seq := range acked {
		if stored[k] < seq {
			t.Fatalf("run %d: %s acknowledged up to seq %d, journal has %d", run, k, seq, stored[k])
		}
	}
	for b, n := range batches {
		if n != 2 {
			t.Fatalf("run %d: batch %s has %d of its 2 events", run, b, n)
		}
	}
}
