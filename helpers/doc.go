// Package helpers holds the static programs a runtime ships into Docker:
// stockade-warden, delivered into every sandbox's workspace (it spawns and
// supervises the sandbox's processes), and stockade-egress, the proxy image
// of allowlist sandboxes.
//
// Where they come from: both are built static (CGO_ENABLED=0: they run in any
// image, with or without a libc) and reproducibly for linux/amd64 and
// linux/arm64 by `go generate ./helpers/` (make generate), gzip-compressed and
// committed under helpers/bin with manifest.json (each binary's sha256, size
// and protocol version, and the Go release that built them). The files of
// the runtime's own GOARCH are embedded, so `go install …/cmd/stockade` and a
// program that imports the module need nothing else on disk. make
// helpers-check fails when the committed artifacts are not what the source
// builds. On another GOARCH nothing is embedded: $STOCKADE_WARDEN and
// $STOCKADE_EGRESS (or Options.WardenBinary and Options.EgressBinary) must name builds.
//
// How they are installed: Locate (what stockade.Open uses; it writes
// nothing) and Resolve (Locate, then install) take, in order, the path the
// caller names (Options.WardenBinary), the helper's variable ($STOCKADE_WARDEN),
// else the embedded artifact. A named file is checked once (a static Linux
// ELF executable whose `version` prints this runtime's protocol version). The
// embedded artifact is decompressed only when first needed (Resolve, or the
// first Bytes) and written to a content-addressed file under the state
// directory, the journal's directory:
//
//	<journal dir>/helpers/sha256-<hex>/stockade-warden
//
// atomically (a temporary file renamed into place), mode 0500 in a 0700
// directory. Runtimes sharing a state directory share the file: the same name
// always means the same bytes, so concurrent writers cannot disagree.
//
// How they are verified: a Binary's Bytes reads the file (a regular file,
// not through a symlink) and checks its sha256 before each use: dockerio
// calls it for every warden delivery into a sandbox, and for the egress
// image when a runtime first builds it (the image is tagged with a prefix of
// the digest and adopted by that tag later). An embedded binary whose installed file
// changed is rewritten from the embedded copy; a named file that changed
// since it was checked is refused with a *DigestError naming it.
package helpers

//go:generate go run ./internal/gen -out bin
