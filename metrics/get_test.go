package metrics_test

import (
	"fmt"
	"io"
	"net/http"
)

// srvGet is one GET of a test server's page.
func srvGet(url string) (string, error) {
	resp, err := http.Get(url) //nolint:gosec // G107: a test server's URL
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
