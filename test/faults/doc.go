// Package faults runs the runtime behind a fault-injecting proxy in front of
// the real daemon (internal/faultproxy): connections reset mid-create and
// mid-exec, streams cut, truncated, corrupted or stalled, the warden's link
// cut, replies slowed, the event stream lost, Verify on a live journal. Each
// fault must end in a typed error within a bound and leave nothing behind.
// `make faults` runs it alone.
//
// It needs Docker and the sandbox image (make image).
package faults
