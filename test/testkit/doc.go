// Package testkit is what the suites under test/ share, so that each suite's
// package holds only its tests.
//
//   - Main is every suite's TestMain: it keeps the tests, and every child
//     process they start, away from the user's real state, and has the
//     suites take turns on the daemon (OneAtATime).
//   - The fixtures on the real Docker daemon: APIEnv, a runtime through the
//     embedding API (NewAPI); CLIEnv, the stockade binary on a journal of its
//     own (NewCLI), and Served, that binary as `stockade serve` (CLIEnv.Serve,
//     ServedKeptSandbox); DioEnv, dockerio's Adapter alone (NewDio).
//   - For the egress tests: OutsideServer (the "outside", an HTTP server on
//     the host), the proxy scripts (ConnectVia, GetVia) and AllowlistPolicy.
//   - Small helpers: archives (TarOf, ReadTar, EscapingLinks), journaled
//     history (SandboxTypes, Count), timings (Percentile, Ms),
//     subprocesses (StartSubprocess, LockedBuffer). Polling is
//     internal/testutil's Eventually, as in the unit tests.
//
// Every fixture reaches the daemon through internal/dockertest: under
// CI=true a test whose daemon does not answer fails, outside CI it is
// skipped with a message saying why; everything a fixture makes carries its
// own owner label (io.stockade.owner) and is removed when the test ends,
// pass or fail.
package testkit
