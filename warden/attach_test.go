package warden

import "testing"

// TestSocketPID: the pid a reattach socket's name gives, and the names refused.
func TestSocketPID(t *testing.T) {
	for _, tc := range []struct {
		path string
		pid  int
	}{
		{"/tmp/.stockade-warden-42.sock", 42},
		{".stockade-warden-7.sock", 7},
		{"/tmp/.stockade-warden-042.sock", 0},
		{"/tmp/.stockade-warden--1.sock", 0},
		{"/tmp/.stockade-warden-0.sock", 0},
		{"/tmp/.stockade-warden-42", 0},
		{"/tmp/x.sock", 0},
		{"/tmp/.stockade-warden-.sock", 0},
	} {
		pid, err := socketPID(tc.path)
		if pid != tc.pid || (err == nil) != (tc.pid != 0) {
			t.Errorf("socketPID(%q) = %d, %v; want %d", tc.path, pid, err, tc.pid)
		}
	}
}
