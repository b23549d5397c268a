package recorder

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

const testSandbox = "sb-1"

func decision(seq uint64) egress.Decision {
	return egress.Decision{
		Seq:     seq,
		Time:    time.Date(2025, 1, 2, 3, 4, 5, int(seq), time.UTC),
		Process: "p-1",
		Client:  "10.213.0.3:40000",
		Method:  "CONNECT",
		Host:    "example.com",
		Port:    443,
		Addr:    "93.184.216.34:443",
		Verdict: egress.VerdictAllow,
		Rule:    "example.com:443",
		Up:      int64(seq),
		Down:    2 * int64(seq),
		Millis:  7,
	}
}

// line is one decision as the log writes it.
func line(t testing.TB, d egress.Decision) string {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func lines(t testing.TB, seqs ...uint64) string {
	t.Helper()
	var s strings.Builder
	for _, q := range seqs {
		s.WriteString(line(t, decision(q)))
	}
	return s.String()
}

// writeDecisions puts content in the sandbox's decision file with the given
// suffix ("" or ".1").
func writeDecisions(t testing.TB, dir, suffix, content string) {
	t.Helper()
	p := decisionPath(dir, testSandbox) + suffix
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readSeqs is ReadDecisions collected into sequence numbers.
func readSeqs(dir, sandbox string) ([]uint64, error) {
	var seqs []uint64
	err := ReadDecisions(dir, sandbox, func(d egress.Decision) error {
		seqs = append(seqs, d.Seq)
		return nil
	})
	return seqs, err
}

func openDecisions(t *testing.T, dir string) *DecisionLog {
	t.Helper()
	l, err := OpenDecisions(dir, testSandbox)
	if err != nil {
		t.Fatalf("OpenDecisions: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestDecisionLogAppendReopen(t *testing.T) {
	dir := t.TempDir()
	l := openDecisions(t, dir)
	if got := l.Last(); got != 0 {
		t.Fatalf("Last of a new log = %d, want 0", got)
	}
	for q := uint64(1); q <= 3; q++ {
		if err := l.Append(decision(q)); err != nil {
			t.Fatalf("Append(%d): %v", q, err)
		}
		if got := l.Last(); got != q {
			t.Fatalf("Last after Append(%d) = %d", q, got)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Append(decision(4)); spec.CodeOf(err) != spec.CodeJournal {
		t.Fatalf("Append after Close = %v, want a %s error", err, spec.CodeJournal)
	}

	var got []egress.Decision
	if err := ReadDecisions(dir, testSandbox, func(d egress.Decision) error { got = append(got, d); return nil }); err != nil {
		t.Fatalf("ReadDecisions: %v", err)
	}
	want := []egress.Decision{decision(1), decision(2), decision(3)}
	if !slices.EqualFunc(got, want, sameDecision) {
		t.Fatalf("ReadDecisions = %+v, want %+v", got, want)
	}

	l2 := openDecisions(t, dir)
	if got := l2.Last(); got != 3 {
		t.Fatalf("Last after reopening = %d, want 3", got)
	}
	if err := l2.Append(decision(4)); err != nil {
		t.Fatalf("Append after reopening: %v", err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if seqs, err := readSeqs(dir, testSandbox); err != nil || !slices.Equal(seqs, []uint64{1, 2, 3, 4}) {
		t.Fatalf("ReadDecisions = %v, %v; want [1 2 3 4]", seqs, err)
	}
	if fi, err := os.Stat(decisionPath(dir, testSandbox)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("decision file: %v, %v; want mode 0600", fi, err)
	}
}

// sameDecision compares times with Equal and the rest with ==.
func sameDecision(a, b egress.Decision) bool {
	if !a.Time.Equal(b.Time) {
		return false
	}
	b.Time = a.Time
	return a == b
}

// bigDecision is a decision whose line is about size bytes.
func bigDecision(seq uint64, size int) egress.Decision {
	d := decision(seq)
	d.Verdict = egress.VerdictDeny
	d.Reason = strings.Repeat("r", size)
	return d
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func fileSeqs(t *testing.T, p string) []uint64 {
	t.Helper()
	var seqs []uint64
	if _, err := readDecisionFile(p, func(d egress.Decision) error { seqs = append(seqs, d.Seq); return nil }); err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return seqs
}

func TestDecisionLogRotation(t *testing.T) {
	dir := t.TempDir()
	path := decisionPath(dir, testSandbox)
	l := openDecisions(t, dir)

	// Lines of a little under a fifth of the bound: five fill a file, the
	// sixth rotates it.
	size := MaxDecisionBytes/5 - 1000
	perFile := uint64(MaxDecisionBytes / len(line(t, bigDecision(1, size))))
	if perFile != 5 {
		t.Fatalf("%d lines fit in a file, want 5", perFile)
	}
	seq := uint64(0)
	appendN := func(n uint64) {
		t.Helper()
		for range n {
			seq++
			if err := l.Append(bigDecision(seq, size)); err != nil {
				t.Fatalf("Append(%d): %v", seq, err)
			}
		}
	}

	appendN(perFile)
	if _, err := os.Stat(path + ".1"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a .1 file before the bound: %v", err)
	}
	if got := fileSeqs(t, path); !slices.Equal(got, seqRange(1, perFile)) {
		t.Fatalf("current file holds %v, want 1..%d", got, perFile)
	}

	// One more crosses the bound: the full file becomes .1.
	appendN(1)
	if got := fileSeqs(t, path+".1"); !slices.Equal(got, seqRange(1, perFile)) {
		t.Fatalf(".1 holds %v, want 1..%d", got, perFile)
	}
	if got := fileSeqs(t, path); !slices.Equal(got, []uint64{perFile + 1}) {
		t.Fatalf("current file after rotating holds %v, want [%d]", got, perFile+1)
	}
	if seqs, err := readSeqs(dir, testSandbox); err != nil || !slices.Equal(seqs, seqRange(1, perFile+1)) {
		t.Fatalf("ReadDecisions = %v, %v; want 1..%d", seqs, err, perFile+1)
	}

	// Fill the current file and cross again: the first .1 is dropped.
	appendN(perFile)
	first := perFile + 1
	if got := fileSeqs(t, path+".1"); !slices.Equal(got, seqRange(first, first+perFile-1)) {
		t.Fatalf(".1 after the second rotation holds %v, want %d..%d", got, first, first+perFile-1)
	}
	if got := fileSeqs(t, path); !slices.Equal(got, []uint64{seq}) {
		t.Fatalf("current file after the second rotation holds %v, want [%d]", got, seq)
	}
	if seqs, err := readSeqs(dir, testSandbox); err != nil || !slices.Equal(seqs, seqRange(first, seq)) {
		t.Fatalf("ReadDecisions = %v, %v; want %d..%d", seqs, err, first, seq)
	}
	for _, p := range []string{path, path + ".1"} {
		if n := fileSize(t, p); n > MaxDecisionBytes {
			t.Fatalf("%s is %d bytes, over the bound %d", p, n, MaxDecisionBytes)
		}
	}
	if got := l.Last(); got != seq {
		t.Fatalf("Last = %d, want %d", got, seq)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := openDecisions(t, dir).Last(); got != seq {
		t.Fatalf("Last after reopening = %d, want %d", got, seq)
	}
}

func seqRange(from, to uint64) []uint64 {
	var s []uint64
	for q := from; q <= to; q++ {
		s = append(s, q)
	}
	return s
}

// A single decision over the bound is written alone in its file and reads
// back whole (the reader has no line limit of its own).
func TestDecisionLogOversizedDecision(t *testing.T) {
	dir := t.TempDir()
	l := openDecisions(t, dir)
	if err := l.Append(decision(1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(bigDecision(2, MaxDecisionBytes+10)); err != nil {
		t.Fatalf("Append of an oversized decision: %v", err)
	}
	if err := l.Append(decision(3)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := decisionPath(dir, testSandbox)
	if got := fileSeqs(t, path+".1"); !slices.Equal(got, []uint64{2}) {
		t.Fatalf(".1 holds %v, want the oversized decision alone", got)
	}
	var reasons []int
	err := ReadDecisions(dir, testSandbox, func(d egress.Decision) error {
		reasons = append(reasons, len(d.Reason))
		return nil
	})
	if err != nil || !slices.Equal(reasons, []int{MaxDecisionBytes + 10, 0}) {
		t.Fatalf("ReadDecisions: reason lengths %v, %v; want [%d 0]", reasons, err, MaxDecisionBytes+10)
	}
}

func TestReadDecisions(t *testing.T) {
	whole := lines(t, 1, 2)
	torn := line(t, decision(3))
	tests := []struct {
		name      string
		prev, cur *string // nil: no such file
		want      []uint64
		code      spec.Code // "" for no error
		errHas    string
	}{
		{name: "no files"},
		{name: "empty file", cur: ptr("")},
		{name: "current only", cur: ptr(lines(t, 1, 2, 3)), want: []uint64{1, 2, 3}},
		{name: "previous only", prev: ptr(lines(t, 1, 2)), want: []uint64{1, 2}},
		{name: "previous then current", prev: ptr(lines(t, 1, 2)), cur: ptr(lines(t, 3, 4)), want: []uint64{1, 2, 3, 4}},
		{name: "torn last line", cur: ptr(whole + torn[:len(torn)/2]), want: []uint64{1, 2}},
		{name: "torn last line of one byte", cur: ptr(whole + "{"), want: []uint64{1, 2}},
		{name: "last line without its newline", cur: ptr(whole + torn[:len(torn)-1]), want: []uint64{1, 2}},
		{name: "torn tail of .1, then current", prev: ptr(whole + torn[:9]), cur: ptr(lines(t, 4)), want: []uint64{1, 2, 4}},
		{name: "only a torn line", cur: ptr(torn[:20])},
		{name: "malformed middle line", cur: ptr(lines(t, 1) + "{not json\n" + lines(t, 3)), want: []uint64{1}, code: spec.CodeJournal, errHas: "line 2"},
		{name: "malformed last whole line", cur: ptr(whole + "garbage\n"), want: []uint64{1, 2}, code: spec.CodeJournal, errHas: "line 3"},
		{name: "blank middle line", cur: ptr(lines(t, 1) + "\n" + lines(t, 2)), want: []uint64{1}, code: spec.CodeJournal, errHas: "line 2"},
		{name: "wrong type", cur: ptr(`{"seq":"one"}` + "\n"), code: spec.CodeJournal, errHas: "line 1"},
		{name: "malformed .1 stops before current", prev: ptr("x\n"), cur: ptr(whole), code: spec.CodeJournal, errHas: ".jsonl.1 line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.prev != nil {
				writeDecisions(t, dir, ".1", *tt.prev)
			}
			if tt.cur != nil {
				writeDecisions(t, dir, "", *tt.cur)
			}
			got, err := readSeqs(dir, testSandbox)
			if !slices.Equal(got, tt.want) {
				t.Errorf("decisions = %v, want %v", got, tt.want)
			}
			if c := spec.CodeOf(err); c != tt.code {
				t.Fatalf("error %v (code %q), want code %q", err, c, tt.code)
			}
			if err != nil && !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("error %q does not say %q", err, tt.errHas)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestReadDecisionsCallbackError(t *testing.T) {
	dir := t.TempDir()
	writeDecisions(t, dir, ".1", lines(t, 1, 2))
	writeDecisions(t, dir, "", lines(t, 3))
	stop := errors.New("stop")
	var seen []uint64
	err := ReadDecisions(dir, testSandbox, func(d egress.Decision) error {
		seen = append(seen, d.Seq)
		if d.Seq == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(seen, []uint64{1, 2}) {
		t.Fatalf("ReadDecisions = %v after %v; want the callback's error after [1 2]", err, seen)
	}
}

// A crash mid-append leaves a torn line; reopening drops it so the next
// append starts a whole line, and everything reads back.
func TestOpenDecisionsTornTail(t *testing.T) {
	for _, tail := range []string{`{"seq":3,"ti`, strings.TrimSuffix(line(t, decision(3)), "\n")} {
		t.Run("", func(t *testing.T) {
			dir := t.TempDir()
			writeDecisions(t, dir, "", lines(t, 1, 2)+tail)
			l := openDecisions(t, dir)
			if got := l.Last(); got != 2 {
				t.Fatalf("Last = %d, want 2 (the torn line is not a decision)", got)
			}
			if err := l.Append(decision(3)); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if seqs, err := readSeqs(dir, testSandbox); err != nil || !slices.Equal(seqs, []uint64{1, 2, 3}) {
				t.Fatalf("after appending to a torn log: %v, %v; want [1 2 3]", seqs, err)
			}
			if got, want := fileSize(t, decisionPath(dir, testSandbox)), int64(len(lines(t, 1, 2, 3))); got != want {
				t.Fatalf("file is %d bytes, want %d", got, want)
			}
		})
	}
}

// A crash between a rotation and the append after it leaves the current
// file empty or torn: Last comes from .1, so the proxy is not asked to send
// everything again.
func TestOpenDecisionsAfterRotationCrash(t *testing.T) {
	for _, cur := range []*string{nil, ptr(""), ptr(`{"seq":6`)} {
		t.Run("", func(t *testing.T) {
			dir := t.TempDir()
			writeDecisions(t, dir, ".1", lines(t, 4, 5))
			if cur != nil {
				writeDecisions(t, dir, "", *cur)
			}
			if got := openDecisions(t, dir).Last(); got != 5 {
				t.Fatalf("Last = %d, want 5 from .1", got)
			}
		})
	}
}

func TestOpenDecisionsCorrupt(t *testing.T) {
	for _, suffix := range []string{"", ".1"} {
		t.Run("file"+suffix, func(t *testing.T) {
			dir := t.TempDir()
			writeDecisions(t, dir, suffix, "not json\n"+lines(t, 2))
			l, err := OpenDecisions(dir, testSandbox)
			if l != nil {
				_ = l.Close()
			}
			// With the current file missing, .1 is read for Last.
			if spec.CodeOf(err) != spec.CodeJournal {
				t.Fatalf("OpenDecisions over a corrupt file%s = %v, want a %s error", suffix, err, spec.CodeJournal)
			}
		})
	}
}

func TestRemoveDecisions(t *testing.T) {
	dir := t.TempDir()
	writeDecisions(t, dir, ".1", lines(t, 1))
	writeDecisions(t, dir, "", lines(t, 2))
	other := "sb-2"
	if err := os.WriteFile(decisionPath(dir, other), []byte(lines(t, 9)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDecisions(dir, testSandbox); err != nil {
		t.Fatalf("RemoveDecisions: %v", err)
	}
	path := decisionPath(dir, testSandbox)
	for _, p := range []string{path, path + ".1"} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s after RemoveDecisions: %v", p, err)
		}
	}
	if seqs, err := readSeqs(dir, testSandbox); err != nil || seqs != nil {
		t.Fatalf("ReadDecisions after RemoveDecisions = %v, %v; want none", seqs, err)
	}
	if err := RemoveDecisions(dir, testSandbox); err != nil {
		t.Fatalf("RemoveDecisions of nothing: %v", err)
	}
	if seqs, err := readSeqs(dir, other); err != nil || !slices.Equal(seqs, []uint64{9}) {
		t.Fatalf("another sandbox's decisions after RemoveDecisions: %v, %v", seqs, err)
	}
}

func TestDecisionsRefuseBadNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "../x", "a/b", "x/", "/abs"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "rec")
			calls := map[string]error{
				"ReadDecisions":   ReadDecisions(dir, name, func(egress.Decision) error { t.Fatal("a decision"); return nil }),
				"RemoveDecisions": RemoveDecisions(dir, name),
			}
			l, err := OpenDecisions(dir, name)
			if l != nil {
				_ = l.Close()
			}
			calls["OpenDecisions"] = err
			for fn, err := range calls {
				if spec.CodeOf(err) != spec.CodeInvalidArgument {
					t.Errorf("%s(%q) = %v, want an %s error", fn, name, err, spec.CodeInvalidArgument)
				}
			}
			if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
				t.Fatalf("files made for a refused name: %v, %v", ents, err)
			}
		})
	}
}

// FuzzReadDecisions: any bytes in a decision file read without a panic to
// whole decisions and either no error or a journal error; when they read
// cleanly, opening the log keeps exactly those decisions (dropping only a
// torn tail) and an append after them reads back after them.
func FuzzReadDecisions(f *testing.F) {
	whole := lines(f, 1, 2, 3)
	f.Add([]byte(""))
	f.Add([]byte(whole))
	f.Add([]byte(whole[:len(whole)-1]))
	f.Add([]byte(whole[:len(whole)/2]))
	f.Add([]byte(lines(f, 1) + "{not json\n" + lines(f, 3)))
	f.Add([]byte("\n"))
	f.Add([]byte("{}\n{}"))
	f.Add([]byte(`{"seq":18446744073709551615,"time":"2025-01-02T03:04:05Z","verdict":"lost"}` + "\n"))
	f.Add([]byte(`{"seq":-1}` + "\n"))
	f.Add([]byte("null\n[]\n"))
	f.Add([]byte("\xff\xfe\x00\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		writeDecisions(t, dir, "", string(b))
		var got []uint64
		err := ReadDecisions(dir, testSandbox, func(d egress.Decision) error { got = append(got, d.Seq); return nil })
		if err != nil {
			if c := spec.CodeOf(err); c != spec.CodeJournal {
				t.Fatalf("ReadDecisions error %v has code %q, want %q", err, c, spec.CodeJournal)
			}
			return
		}
		l, err := OpenDecisions(dir, testSandbox)
		if err != nil {
			t.Fatalf("OpenDecisions over bytes ReadDecisions read cleanly: %v", err)
		}
		defer func() { _ = l.Close() }()
		var last uint64
		if len(got) > 0 {
			last = got[len(got)-1]
		}
		if l.Last() != last {
			t.Fatalf("Last = %d, want %d", l.Last(), last)
		}
		if err := l.Append(decision(last + 1)); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := readSeqs(dir, testSandbox)
		if err != nil || !slices.Equal(again, append(got, last+1)) {
			t.Fatalf("after an append: %v, %v; want %v then %d", again, err, got, last+1)
		}
	})
}
