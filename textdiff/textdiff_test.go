package textdiff

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// apply parses a unified diff (as Unified writes it) and applies it to a,
// checking every context and deleted line against a: the property that
// ties the rendering to the algorithm.
func apply(a, diff string) (string, error) {
	if diff == "" {
		return a, nil
	}
	src := split(a)
	lines := strings.SplitAfter(diff, "\n")
	if len(lines) < 2 || lines[0] != "--- a/f\n" || lines[1] != "+++ b/f\n" {
		return "", fmt.Errorf("no headers: %q", diff)
	}
	var out []string
	next := 0       // the next line of src not yet used
	prev := byte(0) // the kind of the hunk line before
	for _, l := range lines[2:] {
		if l == "" {
			continue
		}
		if !strings.HasSuffix(l, "\n") {
			return "", fmt.Errorf("line %q without its newline", l)
		}
		switch {
		case strings.HasPrefix(l, "@@ "):
			var fs, fl, ts, tl int
			if _, err := fmt.Sscanf(l, "@@ -%d,%d +%d,%d @@\n", &fs, &fl, &ts, &tl); err != nil {
				return "", fmt.Errorf("header %q: %w", l, err)
			}
			from := fs - 1
			if fl == 0 {
				from = fs
			}
			if from < next || from > len(src) {
				return "", fmt.Errorf("hunk %q out of order", l)
			}
			out = append(out, src[next:from]...)
			next, prev = from, 0
		case l == NoNewlineMarker+"\n":
			switch prev {
			case ' ', '+':
				out[len(out)-1] = strings.TrimSuffix(out[len(out)-1], "\n")
			case '-':
			default:
				return "", errors.New("marker after no line")
			}
			prev = 0
		default:
			text := l[1:]
			switch l[0] {
			case ' ', '-':
				if next >= len(src) || strings.TrimSuffix(src[next], "\n") != strings.TrimSuffix(text, "\n") {
					return "", fmt.Errorf("line %d: %q does not match", next+1, text)
				}
				next++
				if l[0] == ' ' {
					out = append(out, text)
				}
			case '+':
				out = append(out, text)
			default:
				return "", fmt.Errorf("bad line %q", l)
			}
			prev = l[0]
		}
	}
	out = append(out, src[next:]...)
	return strings.Join(out, ""), nil
}

func TestUnified(t *testing.T) {
	for _, tc := range []struct {
		name, a, b, want string
	}{
		{"identical", "x\ny\n", "x\ny\n", ""},
		{"both empty", "", "", ""},
		{"empty to text", "", "a\nb\n", "--- a/f\n+++ b/f\n@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{"text to empty", "a\nb\n", "", "--- a/f\n+++ b/f\n@@ -1,2 +0,0 @@\n-a\n-b\n"},
		{"no trailing newline added", "a\nb", "a\nb\n", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
		{"no trailing newline on both", "a\nb", "a\nc", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"},
		{"one line changed mid-file", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nX\n6\n7\n8\n9\n",
			"--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+X\n 6\n 7\n 8\n"},
		{"two far changes, two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "X\n2\n3\n4\n5\n6\n7\n8\n9\nY\n",
			"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n-1\n+X\n 2\n 3\n 4\n@@ -7,4 +7,4 @@\n 7\n 8\n 9\n-10\n+Y\n"},
		{"two near changes, one hunk", "1\n2\n3\n4\n5\n6\n7\n", "X\n2\n3\n4\n5\n6\nY\n",
			"--- a/f\n+++ b/f\n@@ -1,7 +1,7 @@\n-1\n+X\n 2\n 3\n 4\n 5\n 6\n-7\n+Y\n"},
		{"insert at top", "a\nb\n", "z\na\nb\n", "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n+z\n a\n b\n"},
		{"append to a last line without newline", "a\nb", "a\nb\nc", "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n\\ No newline at end of file\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Unified("f", tc.a, tc.b)
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			back, err := apply(tc.a, got)
			if err != nil || back != tc.b {
				t.Errorf("applying gives %q, %v; want %q", back, err, tc.b)
			}
		})
	}
}

// TestMinimal: the script is a shortest one (Myers), counted in changed
// lines, on cases whose distance is known.
func TestMinimal(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{
		{"a\nb\nc\na\nb\nb\na\n", "c\nb\na\nb\na\nc\n", 5}, // Myers' paper's example
		{"x\n", "y\n", 2},
		{"a\nb\nc\n", "a\nc\n", 1},
	} {
		hs, err := Hunks(tc.a, tc.b)
		if err != nil {
			t.Fatal(err)
		}
		d := 0
		for _, h := range hs {
			for _, l := range h.Lines {
				if l.Kind != Equal {
					d++
				}
			}
		}
		if d != tc.d {
			t.Errorf("%q → %q: %d edits, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}

func TestLarge(t *testing.T) {
	var big strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&big, "line %d\n", i)
	}
	a := big.String()
	// A few changes in a large file: diffed (the common prefix and suffix
	// cost no search).
	b := strings.Replace(a, "line 50000\n", "line fifty thousand\n", 1)
	d := Unified("f", a, b)
	if !strings.Contains(d, "-line 50000\n+line fifty thousand\n") {
		t.Fatalf("no hunk for the change:\n%s", d)
	}
	if back, err := apply(a, d); err != nil || back != b {
		t.Fatalf("applying: %v", err)
	}
	// Every line changed: over MaxEdits, the summary.
	c := strings.ReplaceAll(a, "line", "LINE")
	if _, err := Hunks(a, c); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Hunks: %v, want ErrTooLarge", err)
	}
	s := Unified("f", a, c)
	if !strings.HasPrefix(s, "--- a/f\n+++ b/f\nfiles differ (100000 lines, ") || !strings.Contains(s, "too large for a line diff") {
		t.Fatalf("summary: %q", s)
	}
	// Over MaxBytes: the summary without a search.
	huge := strings.Repeat("x", MaxBytes+1)
	if _, err := Hunks(huge, "x"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Hunks of %d bytes: %v", len(huge), err)
	}
}

// TestRandom: random edits of random texts over a small alphabet (many
// repeated lines, the hard case for a line diff) apply back.
func TestRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gen := func() string {
		var sb strings.Builder
		for range r.IntN(30) {
			sb.WriteString(string(rune('a' + r.IntN(4))))
			if r.IntN(10) > 0 {
				sb.WriteByte('\n')
			}
		}
		return sb.String()
	}
	for range 2000 {
		a, b := gen(), gen()
		if back, err := apply(a, Unified("f", a, b)); err != nil || back != b {
			t.Fatalf("%q → %q: applying gives %q, %v\n%s", a, b, back, err, Unified("f", a, b))
		}
	}
}

// FuzzUnified: applying the rendered hunks to a gives b. The seeds run in
// the normal suite.
func FuzzUnified(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"", "a\n"}, {"a", ""}, {"a\nb", "a\nb\n"}, {"a\nb\nc\n", "a\nc\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "X\n2\n3\n4\n5\n6\n7\n8\n9\nY"},
		{"\n\n\n", "\n"}, {"a\r\nb\r\n", "a\nb\n"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		d := Unified("f", a, b)
		if _, err := Hunks(a, b); errors.Is(err, ErrTooLarge) {
			return // over a bound: no hunks to apply
		}
		back, err := apply(a, d)
		if err != nil || back != b {
			t.Fatalf("%q → %q: applying gives %q, %v\n%s", a, b, back, err, d)
		}
	})
}

// BenchmarkBounded: the worst case the bounds allow, two texts with no
// line in common (the search runs to MaxEdits and gives up), and a large
// file with one change (prefix and suffix trimmed, no search).
func BenchmarkBounded(b *testing.B) {
	var x, y strings.Builder
	for i := range 20_000 {
		fmt.Fprintf(&x, "a %d\n", i)
		fmt.Fprintf(&y, "b %d\n", i)
	}
	a, c := x.String(), y.String()
	b.Run("disjoint", func(b *testing.B) {
		for b.Loop() {
			if _, err := Hunks(a, c); !errors.Is(err, ErrTooLarge) {
				b.Fatal(err)
			}
		}
	})
	one := strings.Replace(a, "a 10000\n", "changed\n", 1)
	b.Run("one-change", func(b *testing.B) {
		for b.Loop() {
			if _, err := Hunks(a, one); err != nil {
				b.Fatal(err)
			}
		}
	})
}
