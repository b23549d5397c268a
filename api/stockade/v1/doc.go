// Package stockadev1 is the generated Go code of the stockade server's API
// (stockade.proto, package stockade.v1). Do not edit the .pb.go files: edit
// stockade.proto and run `make proto`; `make test` fails while they are
// stale. The server is server/, the Go client client/.
package stockadev1
