//go:build !linux

package journal

// lockHolders has no kernel table to read here; lockedError falls back to
// the pid file.
func lockHolders(string) []string { return nil }
