// Package drill runs the crash drill, `stockade drill`, over the failpoints
// make test drills (failpoints_test.go): a child runtime SIGKILLed at each, a
// new one recovering, and the drill's invariants checked; the journals it
// leaves are checked again here with its checks (internal/drillcheck).
// `make drill` runs the whole drill, random kills besides.
//
// It builds the stockade binary and needs Docker and the sandbox image (make
// image).
package drill
