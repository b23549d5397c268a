package testkit

import (
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stockade/stockade"
)

// Itoa formats n in base 10.
func Itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Percentile is the p-th quantile (0 ≤ p ≤ 1) of ds, which it leaves
// unsorted.
func Percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// FirstDiff is the index of the first byte where a and b differ (the
// shorter one's length when one is a prefix of the other).
func FirstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// DockerExec runs a command in a container as the sandbox user, with the
// docker CLI (no runtime of ours involved), and returns its output.
func DockerExec(t testing.TB, container string, argv ...string) string {
	t.Helper()
	out, err := exec.Command("docker", append([]string{"exec", "-u", "65532:65532", container}, argv...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec %v: %v %s", argv, err, out)
	}
	return string(out)
}

// SandboxTypes lists the types of a sandbox's own journaled events, in
// order.
func SandboxTypes(t *testing.T, rt *stockade.Runtime, id string) []string {
	t.Helper()
	h, err := rt.History(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range h {
		if ev.Kind == "sandbox" {
			types = append(types, ev.Type)
		}
	}
	return types
}

// Count is how many times s occurs in ss.
func Count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}
