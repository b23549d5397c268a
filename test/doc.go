// Package test is the map of stockade's suites against the real Docker
// daemon. Each is a package of its own, named for what it proves:
//
//	testkit/     the fixtures and helpers they share (not tests)
//	api/         the embedding API: processes, streams, put and get, output
//	recovery/    what Open does with what an earlier runtime left
//	dockerio/    dockerio's Adapter against the daemon, and the plumbing
//	warden/      the in-sandbox process server as the runtime drives it
//	checkpoint/  checkpoints and rollback of a workspace
//	egress/      the allowlist network and its proxy
//	pool/        warm pools
//	serve/       stockade serve and its clients, its crashes and restarts
//	mcp/         stockade mcp driven by the official MCP SDK's client
//	cli/         the stockade command as a user drives it
//	install/     go install and embedding, for a fresh user
//	drill/       the crash drill over every failpoint
//	hostile/     attacks from inside a sandbox (make hostile)
//	faults/      a misbehaving daemon (make faults)
//	kube/        stockade-node on a real control plane (make cluster)
//	bench/       the benchmarks that need Docker (make bench)
//	load/        100 sandboxes at once (build tag load; make load)
//	soak/        minutes of random work and kills (build tag soak; make soak)
//
// `go test ./test/...` runs them all; `make test` runs them one package at a
// time (docs/testing.md). Under CI=true a test whose daemon does not answer
// fails; outside CI it is skipped with a message saying why. Each test labels
// what it creates with its own owner id and removes it when it ends.
package test
