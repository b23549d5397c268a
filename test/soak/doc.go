// Package soak is the soak test, behind the build tag soak: minutes of
// random work against one `stockade serve`, killed -9 and restarted now and
// then, then what is left compared with the start. `make soak SOAK=3m` runs
// it.
//
// It needs Docker and the sandbox image (make image).
package soak
