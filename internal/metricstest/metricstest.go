// Package metricstest scrapes a Prometheus endpoint until it shows what a
// test waits for: metrics that follow the journal move a moment after the
// commit that moves them.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Await scrapes url until the page contains every line of want, and
// returns that page; the test fails with the last page after timeout.
func Await(tb testing.TB, url string, timeout time.Duration, want ...string) string {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		page, err := get(url)
		if err != nil {
			tb.Fatal(err)
		}
		missing := ""
		for _, w := range want {
			if !strings.Contains(page, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return page
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the metrics at %s lack %q after %v:\n%s", url, missing, timeout, page)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get is one GET of a metrics page.
func get(url string) (string, error) {
	resp, err := http.Get(url) //nolint:gosec // G107: a test's own server
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }() // only read
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}
