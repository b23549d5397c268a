// Package textdiff computes a line diff of two texts and renders it as a
// unified diff (the format of diff -u and git diff): "--- a/PATH",
// "+++ b/PATH", then hunks "@@ -l,n +l,n @@" with Context lines of context
// around each change and "\ No newline at end of file" after a last line
// that has none.
//
// The diff is Myers' O(ND) greedy algorithm over lines, after trimming the
// common prefix and suffix. Its work is bounded: inputs over MaxBytes or
// MaxLines, or needing more than MaxEdits line edits, are not diffed line
// by line; Hunks reports ErrTooLarge and Unified writes a one-line "files
// differ" summary instead. The bounds keep a view of a sandbox-made file
// (untrusted, possibly adversarial) from costing more than about 15 MB
// and a few tens of milliseconds (BenchmarkBounded).
//
// It imports only the standard library.
package textdiff

import (
	"errors"
	"fmt"
	"strings"
)

// Bounds on the work of a diff.
const (
	// MaxBytes bounds each input.
	MaxBytes = 8 << 20
	// MaxLines bounds each input's line count.
	MaxLines = 200_000
	// MaxEdits bounds D, the number of inserted plus deleted lines; the
	// trace Myers keeps for the way back is O(D²) integers.
	MaxEdits = 1_000
	// Context is the number of unchanged lines around each change.
	Context = 3
)

// ErrTooLarge: an input or the edit distance is over a bound.
var ErrTooLarge = errors.New("textdiff: too large for a line diff")

// Kind is what a line of a hunk is.
type Kind byte

const (
	Equal  Kind = ' '
	Delete Kind = '-'
	Insert Kind = '+'
)

// Line is one line of a hunk: Text is without its newline; NoNewline says
// the line is its text's last and has none.
type Line struct {
	Kind      Kind
	Text      string
	NoNewline bool
}

// Hunk is a run of changes with its context. FromStart and ToStart are
// 1-based line numbers; a side with no lines in the hunk (FromLen or ToLen
// 0) starts at the line before it, 0 at the top (as diff -u counts).
type Hunk struct {
	FromStart, FromLen int
	ToStart, ToLen     int
	Lines              []Line
}

// split cuts s into lines, each with its "\n" except perhaps the last.
func split(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// Hunks returns the hunks turning a into b (none when they are equal), or
// ErrTooLarge.
func Hunks(a, b string) ([]Hunk, error) {
	if a == b {
		return nil, nil
	}
	if len(a) > MaxBytes || len(b) > MaxBytes {
		return nil, ErrTooLarge
	}
	la, lb := split(a), split(b)
	if len(la) > MaxLines || len(lb) > MaxLines {
		return nil, ErrTooLarge
	}
	ops, ok := edits(la, lb)
	if !ok {
		return nil, ErrTooLarge
	}
	return hunks(ops, la, lb), nil
}

// op is one step of an edit script: an equal line (both indexes), a
// deleted line of a (ai) or an inserted line of b (bi).
type op struct {
	kind   Kind
	ai, bi int
}

// edits returns a shortest edit script from la to lb; false when it
// needs more than MaxEdits edits.
func edits(la, lb []string) ([]op, bool) {
	// Lines are compared as small integers: a map from text to id.
	ids := map[string]int{}
	intern := func(ls []string) []int {
		out := make([]int, len(ls))
		for i, l := range ls {
			id, ok := ids[l]
			if !ok {
				id = len(ids)
				ids[l] = id
			}
			out[i] = id
		}
		return out
	}
	A, B := intern(la), intern(lb)
	// The common prefix and suffix are equal lines without any search.
	pre := 0
	for pre < len(A) && pre < len(B) && A[pre] == B[pre] {
		pre++
	}
	suf := 0
	for suf < len(A)-pre && suf < len(B)-pre && A[len(A)-1-suf] == B[len(B)-1-suf] {
		suf++
	}
	mid, ok := myers(A[pre:len(A)-suf], B[pre:len(B)-suf])
	if !ok {
		return nil, false
	}
	ops := make([]op, 0, pre+len(mid)+suf)
	for i := range pre {
		ops = append(ops, op{Equal, i, i})
	}
	for _, o := range mid {
		o.ai += pre
		o.bi += pre
		ops = append(ops, o)
	}
	for i := range suf {
		ops = append(ops, op{Equal, len(A) - suf + i, len(B) - suf + i})
	}
	return ops, true
}

// myers is the greedy forward search of "An O(ND) Difference Algorithm"
// (Myers, 1986): for each D, the furthest-reaching path on each diagonal
// k = x - y, following snakes of equal lines. Each round's frontier is
// kept to walk back from (n, m) once it is reached.
func myers(A, B []int) ([]op, bool) {
	n, m := len(A), len(B)
	maxD := min(n+m, MaxEdits)
	// v[k+off] is the furthest x on diagonal k.
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int // trace[d][k+d]: v after round d, diagonals -d..d
	for d := 0; d <= maxD; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down from diagonal k+1: an insertion
			} else {
				x = v[off+k-1] + 1 // right from diagonal k-1: a deletion
			}
			y := x - k
			for x < n && y < m && A[x] == B[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, d, n, m), true
			}
		}
		trace = append(trace, append([]int(nil), v[off-d:off+d+1]...))
	}
	return nil, false
}

// backtrack walks from (n, m) back to (0, 0) through the frontiers of the
// rounds before d and returns the script in order.
func backtrack(trace [][]int, d, n, m int) []op {
	var rev []op
	x, y := n, m
	for ; d > 0; d-- {
		prev := trace[d-1] // diagonals -(d-1)..d-1 at index k+d-1
		at := func(k int) int { return prev[k+d-1] }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		// The edit leads from (px, py) to (mx, my); a snake of equal
		// lines from there to (x, y).
		mx, my := px+1, py
		if pk == k+1 {
			mx, my = px, py+1
		}
		for x > mx && y > my {
			x--
			y--
			rev = append(rev, op{Equal, x, y})
		}
		if pk == k+1 {
			rev = append(rev, op{Insert, px, py})
		} else {
			rev = append(rev, op{Delete, px, py})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, op{Equal, x, y})
	}
	ops := make([]op, len(rev))
	for i, o := range rev {
		ops[len(rev)-1-i] = o
	}
	return ops
}

// hunks groups an edit script into hunks with Context lines around each
// change; changes closer than 2×Context lines share a hunk.
func hunks(ops []op, la, lb []string) []Hunk {
	var out []Hunk
	i := 0
	for i < len(ops) {
		// The next change.
		for i < len(ops) && ops[i].kind == Equal {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(0, i-Context)
		// Extend while the run of equal lines after a change is short
		// enough to join the next change.
		end := i
		for end < len(ops) {
			if ops[end].kind != Equal {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == Equal {
				run++
			}
			if run == len(ops) || run-end > 2*Context {
				end = min(end+Context, len(ops))
				break
			}
			end = run
		}
		out = append(out, makeHunk(ops[start:end], la, lb))
		i = end
	}
	return out
}

func makeHunk(ops []op, la, lb []string) Hunk {
	var h Hunk
	// Where each side starts: the first op's indexes are the lines it
	// stands at on both sides.
	h.FromStart, h.ToStart = ops[0].ai+1, ops[0].bi+1
	line := func(s string) (string, bool) {
		t, had := strings.CutSuffix(s, "\n")
		return t, !had
	}
	for _, o := range ops {
		var l Line
		l.Kind = o.kind
		switch o.kind {
		case Equal:
			l.Text, l.NoNewline = line(la[o.ai])
			h.FromLen++
			h.ToLen++
		case Delete:
			l.Text, l.NoNewline = line(la[o.ai])
			h.FromLen++
		case Insert:
			l.Text, l.NoNewline = line(lb[o.bi])
			h.ToLen++
		}
		h.Lines = append(h.Lines, l)
	}
	if h.FromLen == 0 {
		h.FromStart--
	}
	if h.ToLen == 0 {
		h.ToStart--
	}
	return h
}

// Header is a hunk's "@@ -l,n +l,n @@" line (without its newline).
func (h Hunk) Header() string {
	return fmt.Sprintf("@@ -%d,%d +%d,%d @@", h.FromStart, h.FromLen, h.ToStart, h.ToLen)
}

// NoNewlineMarker follows a line that ends its text without a newline.
const NoNewlineMarker = `\ No newline at end of file`

// Unified renders the diff from a to b of the file at path as a unified
// diff ("--- a/PATH", "+++ b/PATH", the hunks); "" when they are equal.
// Over a bound it renders the headers and a one-line summary instead
// (see Summary).
func Unified(path, a, b string) string {
	hs, err := Hunks(a, b)
	if a == b {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- a/%s\n+++ b/%s\n", path, path)
	if err != nil {
		sb.WriteString(Summary(a, b) + "\n")
		return sb.String()
	}
	for _, h := range hs {
		sb.WriteString(h.Header() + "\n")
		for _, l := range h.Lines {
			sb.WriteByte(byte(l.Kind))
			sb.WriteString(l.Text)
			sb.WriteByte('\n')
			if l.NoNewline {
				sb.WriteString(NoNewlineMarker + "\n")
			}
		}
	}
	return sb.String()
}

// Summary is the fallback for texts too large to diff line by line:
// "files differ (L1 lines, B1 bytes → L2 lines, B2 bytes; too large for a
// line diff)".
func Summary(a, b string) string {
	lines := func(s string) int {
		n := strings.Count(s, "\n")
		if s != "" && !strings.HasSuffix(s, "\n") {
			n++
		}
		return n
	}
	return fmt.Sprintf("files differ (%d lines, %d bytes → %d lines, %d bytes; too large for a line diff)", lines(a), len(a), lines(b), len(b))
}
