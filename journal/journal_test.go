package journal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/stockade/stockade/spec"
)

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestOpenCreatesAndReopens(t *testing.T) {
	path := tempPath(t)
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	owner := j.Owner()
	if !regexp.MustCompile(`^[a-z2-7]{29}$`).MatchString(owner) {
		t.Fatalf("owner %q is not 29 base32 characters", owner)
	}
	if j.DaemonID() != "" || j.ReadOnly() || j.Path() != path {
		t.Fatalf("new journal: daemon %q readOnly %v path %q", j.DaemonID(), j.ReadOnly(), j.Path())
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("journal dir: %v %v", fi.Mode(), err)
	}
	if pid := ReadPIDFile(path + ".pid"); pid != os.Getpid() {
		t.Fatalf("pid file names %d, want %d", pid, os.Getpid())
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(path + ".pid"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pid file left after Close: %v", err)
	}
	j2 := open(t, path, Options{Owner: owner})
	if j2.Owner() != owner {
		t.Fatalf("reopened owner %q, want %q", j2.Owner(), owner)
	}
	other := open(t, tempPath(t), Options{})
	if other.Owner() == owner {
		t.Fatal("two new journals share an owner")
	}
}

func TestOpenErrors(t *testing.T) {
	existing := tempPath(t)
	ej, err := Open(existing, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = ej.Close()

	mkBolt := func(t *testing.T, fn func(tx *bbolt.Tx) error) string {
		p := filepath.Join(t.TempDir(), "x.db")
		db, err := bbolt.Open(p, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(fn); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		path  func(t *testing.T) string
		opts  Options
		code  spec.Code
		cause error
		// created: whether the file may exist afterwards
		absentAfter bool
	}{
		{name: "empty path", path: func(*testing.T) string { return "" }, code: spec.CodeInvalidArgument},
		{name: "owner differs", path: func(*testing.T) string { return existing }, opts: Options{Owner: "someoneelse"}, code: spec.CodeIdentityMismatch},
		{name: "owner for a missing file", path: func(t *testing.T) string { return tempPath(t) }, opts: Options{Owner: "abc"}, code: spec.CodeIdentityMismatch, absentAfter: true},
		{name: "read-only missing", path: func(t *testing.T) string { return tempPath(t) }, opts: Options{ReadOnly: true}, code: spec.CodeNotFound, absentAfter: true},
		{name: "owner for an empty bbolt file", path: func(t *testing.T) string {
			return mkBolt(t, func(*bbolt.Tx) error { return nil })
		}, opts: Options{Owner: "abc"}, code: spec.CodeIdentityMismatch},
		{name: "read-only empty bbolt file", path: func(t *testing.T) string {
			return mkBolt(t, func(*bbolt.Tx) error { return nil })
		}, opts: Options{ReadOnly: true}, code: spec.CodeJournal, cause: ErrNotJournal},
		{name: "foreign bbolt file", path: func(t *testing.T) string {
			return mkBolt(t, func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
		}, code: spec.CodeJournal, cause: ErrNotJournal},
		{name: "not a bbolt file", path: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "junk.db")
			if err := os.WriteFile(p, bytes.Repeat([]byte("junk"), 4096), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, code: spec.CodeJournal, cause: ErrNotJournal},
		{name: "unknown schema", path: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "j.db")
			j, err := Open(p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, []byte("2")) }); err != nil {
				t.Fatal(err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			return p
		}, code: spec.CodeJournal, cause: ErrUnknownSchema},
		{name: "garbled schema", path: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "j.db")
			j, err := Open(p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, []byte("one")) }); err != nil {
				t.Fatal(err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			return p
		}, opts: Options{ReadOnly: true}, code: spec.CodeJournal, cause: ErrUnknownSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path(t)
			var before [32]byte
			if _, err := os.Stat(p); err == nil {
				before = fileSum(t, p)
			}
			j, err := Open(p, tt.opts)
			if err == nil {
				if err := j.Close(); err != nil {
					t.Error(err)
				}
			}
			wantCode(t, err, tt.code, tt.cause)
			if p == "" {
				return
			}
			_, serr := os.Stat(p)
			switch {
			case tt.absentAfter && serr == nil:
				t.Fatalf("%s was created", p)
			case !tt.absentAfter && serr == nil && fileSum(t, p) != before:
				t.Fatalf("%s was modified by a refused Open", p)
			}
			if !strings.Contains(err.Error(), filepath.Base(p)) {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

func TestOpenLocked(t *testing.T) {
	path := tempPath(t)
	w := open(t, path, Options{})
	for _, ro := range []bool{false, true} {
		start := time.Now()
		_, err := Open(path, Options{LockTimeout: 100 * time.Millisecond, ReadOnly: ro})
		wantCode(t, err, spec.CodeJournalLocked, nil)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("locked open took %s", d)
		}
		for _, want := range []string{path, fmt.Sprintf("pid %d", os.Getpid())} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %q", err, want)
			}
		}
	}
	// The writer still works.
	mustAppend(t, w, rec(sb("a"), "t", 1))
	_ = w.Close()

	// A stale pid file naming a dead process blocks nothing.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no `true` binary:", err)
	}
	dead := cmd.Process.Pid
	if err := os.WriteFile(path+".pid", []byte(strconv.Itoa(dead)), 0o600); err != nil {
		t.Fatal(err)
	}
	if LivePIDFile(path+".pid") != 0 {
		t.Fatalf("pid file of dead process %d is taken for a holder", dead)
	}
	j := open(t, path, Options{LockTimeout: 50 * time.Millisecond})
	if len(readAll(t, j, sb("a"))) != 1 {
		t.Fatal("event lost")
	}
	if ReadPIDFile(path+".pid") != os.Getpid() {
		t.Fatal("pid file not rewritten")
	}
}

func TestLockedErrorFallsBackToPIDFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "j.db")
	if err := os.WriteFile(p, nil, 0o600); err != nil { // nothing holds it: no /proc/locks entry
		t.Fatal(err)
	}
	if err := os.WriteFile(p+".pid", []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	err := lockedError("journal.open", p, time.Second)
	wantCode(t, err, spec.CodeJournalLocked, nil)
	if !strings.Contains(err.Error(), fmt.Sprintf("probably pid %d", os.Getpid())) {
		t.Fatalf("error %q does not name the pid file's pid", err)
	}
	_ = os.Remove(p + ".pid")
	if err := lockedError("journal.open", p, time.Second); !strings.Contains(err.Error(), "pid unknown") {
		t.Fatalf("error %q", err)
	}
}

func TestReadOnlyShared(t *testing.T) {
	path := tempPath(t)
	w := open(t, path, Options{})
	mustAppend(t, w, rec(sb("a"), "t", 1))
	_ = w.Close()
	r1 := open(t, path, Options{ReadOnly: true})
	r2 := open(t, path, Options{ReadOnly: true})
	if len(readAll(t, r1, sb("a"))) != 1 || len(readAll(t, r2, sb("a"))) != 1 {
		t.Fatal("readers disagree")
	}
	_, err := r1.Append(context.Background(), rec(sb("a"), "t", 2))
	wantCode(t, err, spec.CodeJournal, ErrReadOnly)
	wantCode(t, r1.BindDaemon(context.Background(), "d"), spec.CodeJournal, ErrReadOnly)
	_, err = r1.Retain(context.Background(), 0)
	wantCode(t, err, spec.CodeJournal, ErrReadOnly)
	_, err = Open(path, Options{LockTimeout: 50 * time.Millisecond})
	wantCode(t, err, spec.CodeJournalLocked, nil)
	if _, err := os.Stat(path + ".pid"); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a reader wrote the pid file")
	}
}

func TestBindDaemon(t *testing.T) {
	path := tempPath(t)
	j := open(t, path, Options{})
	ctx := context.Background()
	wantCode(t, j.BindDaemon(ctx, ""), spec.CodeInvalidArgument, nil)
	if err := j.BindDaemon(ctx, "DAEMON:ONE"); err != nil {
		t.Fatal(err)
	}
	if err := j.BindDaemon(ctx, "DAEMON:ONE"); err != nil {
		t.Fatalf("same id again: %v", err)
	}
	err := j.BindDaemon(ctx, "DAEMON:TWO")
	wantCode(t, err, spec.CodeIdentityMismatch, nil)
	if !strings.Contains(err.Error(), "DAEMON:ONE") || j.DaemonID() != "DAEMON:ONE" {
		t.Fatalf("mismatch: %v, DaemonID %q", err, j.DaemonID())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	wantCode(t, j.BindDaemon(cctx, "DAEMON:ONE"), spec.CodeCancelled, context.Canceled)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2 := open(t, path, Options{ReadOnly: true})
	if j2.DaemonID() != "DAEMON:ONE" {
		t.Fatalf("reopened DaemonID %q", j2.DaemonID())
	}
}

func TestAppendInvalid(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	mustAppend(t, j, rec(sb("live"), "sandbox.reserved", 1), rec(pr("p1"), "process.reserved", 1))
	mustAppend(t, j, Record{Key: sb("ended"), Type: "sandbox.removed", Terminal: true})
	long := strings.Repeat("x", 129)
	tests := []struct {
		name  string
		recs  []Record
		code  spec.Code
		cause error
	}{
		{"unknown kind", []Record{{Key: Key{Kind: "vm", ID: "a"}, Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"empty id", []Record{{Key: sb(""), Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"slash in id", []Record{{Key: sb("a/b"), Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"space in id", []Record{{Key: sb("a b"), Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"long id", []Record{{Key: sb(long), Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"empty type", []Record{{Key: sb("n")}}, spec.CodeInvalidArgument, nil},
		{"space in type", []Record{{Key: sb("n"), Type: "a b"}}, spec.CodeInvalidArgument, nil},
		{"long type", []Record{{Key: sb("n"), Type: strings.Repeat("t", 256)}}, spec.CodeInvalidArgument, nil},
		{"bad JSON", []Record{{Key: sb("n"), Type: "t", Payload: json.RawMessage("{")}}, spec.CodeInvalidArgument, nil},
		{"huge payload", []Record{{Key: sb("n"), Type: "t", Payload: json.RawMessage(`"` + strings.Repeat("x", MaxPayload) + `"`)}}, spec.CodeInvalidArgument, nil},
		{"parent on a sandbox", []Record{{Key: sb("n"), Parent: "x", Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"bad parent", []Record{{Key: pr("n"), Parent: "x/y", Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"process without parent", []Record{{Key: pr("n"), Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"process changes parent", []Record{{Key: pr("p1"), Parent: "other", Type: "t"}}, spec.CodeInvalidArgument, nil},
		{"terminal stream", []Record{{Key: sb("ended"), Type: "t"}}, spec.CodeInvalidArgument, ErrTerminal},
		{"valid then terminal: all or nothing", []Record{{Key: sb("live"), Type: "t"}, {Key: sb("n"), Type: "t"}, {Key: sb("ended"), Type: "t"}}, spec.CodeInvalidArgument, ErrTerminal},
		{"ends then continues in one call", []Record{{Key: sb("live"), Type: "t", Terminal: true}, {Key: sb("live"), Type: "t"}}, spec.CodeInvalidArgument, ErrTerminal},
		{"valid then malformed", []Record{{Key: sb("live"), Type: "t"}, {Key: sb("n"), Type: ""}}, spec.CodeInvalidArgument, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := j.Append(context.Background(), tt.recs...)
			wantCode(t, err, tt.code, tt.cause)
			if evs != nil {
				t.Fatalf("events returned with an error: %v", evs)
			}
		})
	}
	// Nothing of any refused call was written.
	if err := j.Streams(func(k Key) error {
		if k != sb("live") && k != pr("p1") && k != sb("ended") {
			return fmt.Errorf("unexpected stream %s", k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, j, sb("live"))); n != 1 {
		t.Fatalf("sandbox/live has %d events, want 1", n)
	}
	if err := j.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestAppendSequencesAndIndex(t *testing.T) {
	c := newClock()
	j := open(t, tempPath(t), Options{Now: c.Now})
	evs := mustAppend(t, j,
		rec(sb("s"), "sandbox.reserved", map[string]string{"image": "sha256:x"}),
		rec(sb("s"), "sandbox.started", nil),
		rec(pr("p"), "process.reserved", 1))
	for i, want := range []uint64{1, 2, 1} {
		if evs[i].Seq != want || evs[i].Version != EnvelopeVersion || evs[i].Time.IsZero() {
			t.Fatalf("event %d: %+v", i, evs[i])
		}
	}
	got := readAll(t, j, sb("s"))
	if len(got) != 2 || got[0].Type != "sandbox.reserved" || string(got[0].Payload) != `{"image":"sha256:x"}` ||
		!got[0].Time.Equal(evs[0].Time) || got[1].Payload != nil && string(got[1].Payload) != "null" {
		t.Fatalf("read back %+v", got)
	}
	// A later process event may repeat or omit its parent.
	mustAppend(t, j, Record{Key: pr("p"), Type: "process.started"}, Record{Key: pr("p"), Parent: "sb1", Type: "process.x"})
	live := liveAll(t, j)
	if len(live) != 2 || live[0].Key != pr("p") || live[0].Parent != "sb1" || live[0].LastSeq != 3 || live[0].Type != "process.x" ||
		live[1].Key != sb("s") || live[1].LastSeq != 2 || live[1].Type != "sandbox.started" || live[1].Parent != "" {
		t.Fatalf("live %+v", live)
	}
	mustAppend(t, j, Record{Key: pr("p"), Type: "process.exited", Payload: json.RawMessage(`{"code":0}`), Terminal: true})
	live = liveAll(t, j)
	if len(live) != 1 || live[0].Key != sb("s") {
		t.Fatalf("after exit, live %+v", live)
	}
	last := readAll(t, j, pr("p"))
	if !last[len(last)-1].Terminal || last[0].Terminal {
		t.Fatalf("terminal flags %+v", last)
	}
	var streams []Key
	if err := j.Streams(func(k Key) error { streams = append(streams, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(streams) != "[process/p sandbox/s]" {
		t.Fatalf("streams %v", streams)
	}
	if err := j.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestRead(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	for i := 1; i <= 10; i++ {
		mustAppend(t, j, rec(sb("s"), "e", i))
	}
	sentinel := errors.New("stop")
	tests := []struct {
		from, to uint64
		want     string
		code     spec.Code
	}{
		{0, 0, "1-10", ""},
		{1, 10, "1-10", ""},
		{3, 5, "3-5", ""},
		{7, 0, "7-10", ""},
		{10, 10, "10-10", ""},
		{11, 0, "", ""},
		{5, 100, "5-10", ""},
		{6, 5, "", spec.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%d", tt.from, tt.to), func(t *testing.T) {
			var seqs []uint64
			err := j.Read(sb("s"), tt.from, tt.to, func(e Event) error {
				if string(e.Payload) != strconv.FormatUint(e.Seq, 10) {
					return fmt.Errorf("seq %d payload %s", e.Seq, e.Payload)
				}
				seqs = append(seqs, e.Seq)
				return nil
			})
			if tt.code != "" {
				wantCode(t, err, tt.code, nil)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if len(seqs) > 0 {
				got = fmt.Sprintf("%d-%d", seqs[0], seqs[len(seqs)-1])
				if uint64(len(seqs)) != seqs[len(seqs)-1]-seqs[0]+1 {
					t.Fatalf("gap in %v", seqs)
				}
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	wantCode(t, j.Read(sb("none"), 0, 0, func(Event) error { return nil }), spec.CodeNotFound, nil)
	wantCode(t, j.Read(Key{Kind: "x", ID: "y"}, 0, 0, func(Event) error { return nil }), spec.CodeInvalidArgument, nil)
	n := 0
	err := j.Read(sb("s"), 0, 0, func(Event) error { n++; return sentinel })
	if err != sentinel || n != 1 { //nolint:errorlint // fn's error is returned unchanged (read.go): what this checks
		t.Fatalf("fn error: got %v after %d events", err, n)
	}
	if err := j.Live(func(LiveEntity) error { return sentinel }); err != sentinel { //nolint:errorlint // fn's error is returned unchanged (read.go): what this checks
		t.Fatalf("Live fn error: %v", err)
	}
	if err := j.Streams(func(Key) error { return sentinel }); err != sentinel { //nolint:errorlint // fn's error is returned unchanged (read.go): what this checks
		t.Fatalf("Streams fn error: %v", err)
	}
}

// corrupt rewrites one stored envelope behind the journal's back.
func corrupt(t *testing.T, path string, k Key, seq uint64, fn func([]byte) []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	err = db.Update(func(tx *bbolt.Tx) error {
		b := streamBucket(tx, k)
		v := bytes.Clone(b.Get(seqKey(seq)))
		return b.Put(seqKey(seq), fn(v))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestReadCorrupt(t *testing.T) {
	tests := []struct {
		name  string
		fn    func([]byte) []byte
		cause error
	}{
		{"flipped payload byte", func(b []byte) []byte { b[len(b)-6] ^= 0x20; return b }, ErrCorrupt},
		{"truncated", func(b []byte) []byte { return b[:len(b)-3] }, ErrCorrupt},
		{"empty", func([]byte) []byte { return []byte{0} }, ErrCorrupt},
		{"future version", func(b []byte) []byte { b[1] = 2; return b }, ErrUnknownVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			j, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 5; i++ {
				mustAppend(t, j, rec(sb("s"), "e", i))
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			corrupt(t, path, sb("s"), 3, tt.fn)
			before := fileSum(t, path)

			j = open(t, path, Options{})
			var seen []uint64
			err = j.Read(sb("s"), 0, 0, func(e Event) error { seen = append(seen, e.Seq); return nil })
			wantCode(t, err, spec.CodeJournal, tt.cause)
			if !strings.Contains(err.Error(), "stream sandbox/s seq 3") {
				t.Fatalf("error %q does not name the stream and sequence", err)
			}
			if fmt.Sprint(seen) != "[1 2]" {
				t.Fatalf("delivered %v before the bad record", seen)
			}
			if err := j.Read(sb("s"), 4, 0, func(Event) error { return nil }); err != nil {
				t.Fatalf("records after the bad one: %v", err)
			}
			wantCode(t, j.Export(&bytes.Buffer{}, nil), spec.CodeJournal, tt.cause)
			wantCode(t, j.Verify(), spec.CodeJournal, tt.cause)
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if fileSum(t, path) != before {
				t.Fatal("reading rewrote the file")
			}
			// Append again: the bad record stays where it is.
			j = open(t, path, Options{})
			if evs := mustAppend(t, j, rec(sb("s"), "e", 6)); evs[0].Seq != 6 {
				t.Fatalf("appended at seq %d", evs[0].Seq)
			}
			wantCode(t, j.Read(sb("s"), 0, 0, func(Event) error { return nil }), spec.CodeJournal, tt.cause)
		})
	}
}

func TestCommitFailureFailsTheBatch(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	mustAppend(t, j, rec(sb("s"), "e", 0))
	boom := errors.New("disk on fire")
	j.failCommit = func() error { return boom }
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = j.Append(context.Background(), rec(sb("s"), "e", i), rec(sb(fmt.Sprint("n", i)), "e", i))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		wantCode(t, err, spec.CodeJournal, boom)
	}
	j.failCommit = nil
	if n := len(readAll(t, j, sb("s"))); n != 1 {
		t.Fatalf("failed commits left %d events", n)
	}
	if evs := mustAppend(t, j, rec(sb("s"), "e", 1)); evs[0].Seq != 2 {
		t.Fatalf("after failures, seq %d", evs[0].Seq)
	}
	if err := j.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestGroupCommit(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	mustAppend(t, j, Record{Key: sb("ended"), Type: "t", Terminal: true})
	before := j.commits.Load()
	const G, N = 32, 20
	var wg sync.WaitGroup
	errc := make(chan error, G*N)
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := sb(fmt.Sprint("g", g))
			for i := range N {
				evs, err := j.Append(context.Background(), rec(k, "e", i))
				if err != nil || evs[0].Seq != uint64(i+1) {
					errc <- fmt.Errorf("%s #%d: %v %v", k, i, evs, err) //nolint:errorlint // err is nil when the result is what failed: %w would print %!w(<nil>)
				}
				// A bad caller in the same commits fails alone.
				if g%4 == 0 {
					if _, err := j.Append(context.Background(), Record{Key: sb("ended"), Type: "t"}); !errors.Is(err, ErrTerminal) {
						errc <- fmt.Errorf("append to ended: %v", err) //nolint:errorlint // err is nil when the append was taken: %w would print %!w(<nil>)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	commits := j.commits.Load() - before
	t.Logf("%d appends in %d commits", G*N+G/4*N, commits)
	if commits >= G*N {
		t.Errorf("no coalescing: %d commits for %d appends", commits, G*N)
	}
	if err := j.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestAppendCancelledAndClosed(t *testing.T) {
	path := tempPath(t)
	j := open(t, path, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := j.Append(ctx, rec(sb("s"), "e", 1))
	wantCode(t, err, spec.CodeCancelled, context.Canceled)
	if evs, err := j.Append(context.Background()); evs != nil || err != nil {
		t.Fatalf("empty Append: %v %v", evs, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = j.Append(context.Background(), rec(sb("s"), "e", 1))
	wantCode(t, err, spec.CodeJournal, ErrClosed)
	wantCode(t, j.Read(sb("s"), 0, 0, func(Event) error { return nil }), spec.CodeJournal, ErrClosed)
	wantCode(t, j.Live(func(LiveEntity) error { return nil }), spec.CodeJournal, ErrClosed)
	wantCode(t, j.Streams(func(Key) error { return nil }), spec.CodeJournal, ErrClosed)
	wantCode(t, j.Export(&bytes.Buffer{}, nil), spec.CodeJournal, ErrClosed)
	wantCode(t, j.Verify(), spec.CodeJournal, ErrClosed)
	_, err = j.CopyTo(&bytes.Buffer{})
	wantCode(t, err, spec.CodeJournal, ErrClosed)
	wantCode(t, j.BindDaemon(context.Background(), "d"), spec.CodeJournal, ErrClosed)
	_, err = j.Retain(context.Background(), time.Hour)
	wantCode(t, err, spec.CodeJournal, ErrClosed)
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

func TestCloseWaitsForQueuedAppends(t *testing.T) {
	j, err := Open(tempPath(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.Append(context.Background(), rec(sb(fmt.Sprint("s", i)), "e", i)); err == nil {
				mu.Lock()
				acked++
				mu.Unlock()
			} else if !errors.Is(err, ErrClosed) {
				t.Error(err)
			}
		}()
	}
	time.Sleep(time.Millisecond)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	j2 := open(t, j.Path(), Options{})
	n := 0
	if err := j2.Streams(func(Key) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != acked {
		t.Fatalf("%d acknowledged, %d stored", acked, n)
	}
}

func TestExport(t *testing.T) {
	c := newClock()
	j := open(t, tempPath(t), Options{Now: c.Now})
	mustAppend(t, j, Record{Key: sb("s"), Type: "sandbox.reserved", Payload: json.RawMessage(`{"a":"<b>"}`)}, rec(pr("p"), "process.reserved", nil))
	mustAppend(t, j, Record{Key: pr("p"), Type: "process.exited", Terminal: true})
	var all bytes.Buffer
	if err := j.Export(&all, nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(all.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("export:\n%s", all.String())
	}
	var l exportLine
	if err := json.Unmarshal([]byte(lines[2]), &l); err != nil {
		t.Fatal(err)
	}
	if l.Kind != KindSandbox || l.ID != "s" || l.Seq != 1 || l.Type != "sandbox.reserved" || l.Version != 1 || string(l.Payload) != `{"a":"<b>"}` {
		t.Fatalf("line %q -> %+v", lines[2], l)
	}
	if !strings.Contains(lines[1], `"terminal":true`) || !strings.Contains(lines[1], `"payload":null`) {
		t.Fatalf("line %q", lines[1])
	}
	var one bytes.Buffer
	k := sb("s")
	if err := j.Export(&one, &k); err != nil || one.String() != lines[2]+"\n" {
		t.Fatalf("export one: %q %v", one.String(), err)
	}
	k = sb("none")
	wantCode(t, j.Export(&one, &k), spec.CodeNotFound, nil)
	k = Key{Kind: "x", ID: "y"}
	wantCode(t, j.Export(&one, &k), spec.CodeInvalidArgument, nil)
}

func TestCopyToWhileAppending(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	mustAppend(t, j, rec(sb("s"), "e", 0))
	stopWriter := appendUntilStopped(t, j)
	cp := filepath.Join(t.TempDir(), "copy.db")
	f, err := os.Create(cp)
	if err != nil {
		t.Fatal(err)
	}
	n, err := j.CopyTo(f)
	_ = f.Close()
	stopWriter()
	if err != nil || n == 0 {
		t.Fatalf("CopyTo: %d %v", n, err)
	}
	if fi, _ := os.Stat(cp); fi.Size() != n {
		t.Fatalf("wrote %d, file has %d", n, fi.Size())
	}
	c := open(t, cp, Options{ReadOnly: true, Owner: j.Owner()})
	if err := c.Verify(); err != nil {
		t.Fatal(err)
	}
	if got := len(readAll(t, c, sb("s"))); got < 1 || got > len(readAll(t, j, sb("s"))) {
		t.Fatalf("copy holds %d events", got)
	}
}

func TestRetainAndCompact(t *testing.T) {
	c := newClock()
	path := tempPath(t)
	j := open(t, path, Options{Now: c.Now})
	ctx := context.Background()
	// 1500 old terminal entities (more than one Retain batch), one old live
	// one, then 10 young terminal ones.
	for b := range 15 {
		var recs []Record
		for i := b * 100; i < (b+1)*100; i++ {
			recs = append(recs, rec(pr(fmt.Sprint("old", i)), "process.reserved", bytes.Repeat([]byte("x"), 500)),
				Record{Key: pr(fmt.Sprint("old", i)), Type: "process.exited", Terminal: true})
		}
		mustAppend(t, j, recs...)
	}
	mustAppend(t, j, rec(sb("keep"), "sandbox.reserved", 1))
	c.Advance(2 * time.Hour)
	for i := range 10 {
		mustAppend(t, j, Record{Key: sb(fmt.Sprint("young", i)), Type: "sandbox.removed", Terminal: true})
	}
	wantCode(t, func() error { _, err := j.Retain(ctx, -1); return err }(), spec.CodeInvalidArgument, nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := j.Retain(cctx, time.Hour); spec.CodeOf(err) != spec.CodeCancelled {
		t.Fatalf("cancelled Retain: %v", err)
	}
	n, err := j.Retain(ctx, time.Hour)
	if err != nil || n != 1500 {
		t.Fatalf("Retain: %d %v", n, err)
	}
	if n, err := j.Retain(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("Retain again: %d %v", n, err)
	}
	var left []string
	if err := j.Streams(func(k Key) error { left = append(left, k.String()); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 11 || left[0] != "sandbox/keep" {
		t.Fatalf("left %v", left)
	}
	if err := j.Verify(); err != nil {
		t.Fatal(err)
	}
	// A deleted entity's id is forgotten.
	wantCode(t, j.Read(pr("old1"), 0, 0, func(Event) error { return nil }), spec.CodeNotFound, nil)

	dst := filepath.Join(t.TempDir(), "compact.db")
	wantCode(t, Compact(path, dst), spec.CodeJournalLocked, nil)
	owner := j.Owner()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Compact(path, dst); err != nil {
		t.Fatal(err)
	}
	wantCode(t, Compact(path, dst), spec.CodeInvalidArgument, nil)
	a, _ := os.Stat(path)
	b, _ := os.Stat(dst)
	t.Logf("compact: %d -> %d bytes", a.Size(), b.Size())
	if b.Size() >= a.Size() {
		t.Fatalf("compact did not shrink: %d -> %d", a.Size(), b.Size())
	}
	cj := open(t, dst, Options{Owner: owner})
	if err := cj.Verify(); err != nil {
		t.Fatal(err)
	}
	if len(liveAll(t, cj)) != 1 {
		t.Fatal("live index lost in compaction")
	}
	if evs := mustAppend(t, cj, rec(sb("keep"), "sandbox.started", 2)); evs[0].Seq != 2 {
		t.Fatalf("append after compact: seq %d", evs[0].Seq)
	}
}

// TestNewIDOrder: ids made later sort later (time first, order-preserving
// alphabet), and stay unique.
func TestNewIDOrder(t *testing.T) {
	prev, _ := NewID()
	seen := map[string]bool{prev: true}
	for range 50 {
		time.Sleep(2 * time.Millisecond)
		id, err := NewID()
		if err != nil {
			t.Fatal(err)
		}
		if id <= prev || seen[id] {
			t.Fatalf("id %q made after %q does not sort after it", id, prev)
		}
		seen[id] = true
		prev = id
	}
}

// TestVerifyBesideAWriter: Verify of a journal a writer is appending to
// reports it sound every time (bbolt's page check alone, run beside the
// writer, takes pages the writer frees for corruption, and races it).
func TestVerifyBesideAWriter(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	mustAppend(t, j, rec(sb("s"), "e", 0))
	stopWriter := appendUntilStopped(t, j)
	for range 30 {
		if err := j.Verify(); err != nil {
			stopWriter()
			t.Fatalf("verify beside a writer: %v", err)
		}
	}
	if n := stopWriter(); n == 0 {
		t.Fatal("the writer appended nothing while the journal was verified: the test did not test")
	}
	ents, err := os.ReadDir(filepath.Dir(j.Path()))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".verify-") {
			t.Errorf("the copy verified was left behind: %s", e.Name())
		}
	}
}

// appendUntilStopped appends events to stream s from a goroutine until the
// returned function is called (which waits for the goroutine and returns
// how many it appended).
func appendUntilStopped(t *testing.T, j *Journal) func() int {
	stop := make(chan struct{})
	done := make(chan struct{})
	n := 0
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := j.Append(context.Background(), rec(sb("s"), "e", i)); err != nil {
				t.Error(err)
				return
			}
			n = i
		}
	}()
	return func() int {
		close(stop)
		<-done
		return n
	}
}
