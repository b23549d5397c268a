// Package hostile attacks from inside sandboxes of a served runtime: a
// workload that exhausts its resources, misuses its streams, escapes its
// process group, reaches for privileges or the network, turns on its warden
// or impersonates it (attacks_test.go), or survives a rollback
// (rollback_test.go); the attacks busybox makes awkward run in the python
// image. `make hostile` runs it alone.
//
// It builds the stockade binary and a static probe, and needs Docker and
// both images (make image image-python).
package hostile
