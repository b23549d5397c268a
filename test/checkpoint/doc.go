// Package checkpoint proves checkpoints and rollback of a sandbox's
// workspace on the real daemon: a tree checkpointed and rolled back, a store
// past its bound, rollbacks killed -9 at each step through the CLI, a
// rollback asked right after a checkpoint or stopped midway
// (checkpoint_rollback_test.go); workspaces built to hurt the store: links
// out of it, sparse files, a manifest of links (hostile_trees_test.go).
//
// It needs Docker and the sandbox image (make image); the CLI tests build
// the stockade binary.
package checkpoint
