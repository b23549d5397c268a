// Package recovery proves what Open does with what an earlier runtime left
// behind: a kept sandbox re-adopted after a fresh readback, a one-shot one
// removed, a dead or tampered workload torn down, orphans of this owner
// removed and other owners' resources left alone (decisions_test.go), and a
// sandbox whose journal stream does not fold refused without costing the
// others (unfoldable_stream_test.go).
//
// It needs Docker and the sandbox image (make image).
package recovery
