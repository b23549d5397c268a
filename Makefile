# stockade — build, test and demo targets. See README.md.

# This machine's engine (Docker 20.10, API 1.41, cgroup v1, cgroupfs, no
# AppArmor) cannot pass the default linux-x64 profile; the honest profile for it
# is named here so `make run` and `make test` work. It names every guarantee
# it relaxes (`stockade doctor` prints them). Override on the command line.
STOCKADE_PROFILE ?= linux-x64-engine20-cgroupv1
export STOCKADE_PROFILE

GO ?= go
GOFLAGS ?=
TEST_TIMEOUT ?= 20m
PKGS := ./...

.PHONY: all help build generate helpers-check image image-python image-devtools fmt-check vet proto-tools proto proto-check tidy-check unit test load soak hostile faults bench bench-pool run drill lint clean kube cluster-up cluster-down cluster

all: build ## build (the default)

help: ## this list
	@awk 'BEGIN { FS = ":[^#]*## " } /^[a-z][a-z-]*:.*## / { printf "  make %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# The runtime. Its warden and egress proxy are embedded in it (helpers/):
# nothing else is needed beside it.
build: ## bin/stockade (the warden and egress proxy embedded) and bin/stockade-node
	$(GO) build -o bin/stockade ./cmd/stockade
	$(GO) build -o bin/stockade-node ./cmd/stockade-node

# The embedded helpers (helpers/bin: stockade-warden and stockade-egress for
# linux/amd64 and linux/arm64, static and reproducible, gzip-compressed, and
# manifest.json) are committed, so `go install ./cmd/stockade` needs no other
# step. After editing cmd/warden, cmd/egress or what they import, run make
# generate and commit the result. helpers-check rebuilds them into a
# temporary directory and fails when the committed ones differ from what the
# source builds (a build is reproducible with the same Go release only: the
# check says so when the manifest names another).
generate: ## rebuild the embedded helpers (helpers/bin); commit the result
	$(GO) generate ./helpers/

# The check builds with the Go release the manifest names (GOTOOLCHAIN: the
# go command takes that release from the module proxy when it is not the
# local one), so another local patch release does not fail it.
HELPERS_GO = $$(sed -n 's/^[[:space:]]*"go": "\(go[0-9.]*\)",*$$/\1/p' helpers/bin/manifest.json)
helpers-check: ## fail when the committed helpers differ from what the source builds
	@GOTOOLCHAIN=$(HELPERS_GO) $(GO) run ./helpers/internal/gen -check -out helpers/bin

# The sandbox image, from scratch with no registry (scripts/image.sh).
image: ## the sandbox image stockade/toolbox:dev (static busybox, no registry)
	@./scripts/image.sh

# The realistic image (python3, coreutils) from Debian's packages with
# mmdebstrap from the configured Debian mirror, no registry (scripts/image-python.sh); idempotent like image.
image-python: ## the realistic image stockade/python:dev (Debian + python3, mmdebstrap)
	@./scripts/image-python.sh

# The benchmarks' developer image (git, the whole python3 standard library)
# from Debian's packages, no registry (scripts/image-devtools.sh); idempotent.
image-devtools: ## the benchmarks' image stockade/devtools:dev (Debian + git + python3, mmdebstrap)
	@./scripts/image-devtools.sh

fmt-check: ## fail when gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet every package
	$(GO) vet $(PKGS)

# The API's generated code (api/) is committed. `make proto` regenerates it
# with pinned plugins (installed into bin/tools, idempotently) and Debian's
# protoc (protobuf-compiler, with libprotobuf-dev for the well-known types;
# .ci/run installs both). proto-check regenerates into a temporary directory
# and fails when the committed code differs: a .proto edited without `make
# proto` fails CI. The protoc version line the generator writes into each
# file's header is ignored, so a machine with another protoc release does not
# fail the check for that alone.
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTO_TOOLS := $(CURDIR)/bin/tools
PROTO_FILES := $(shell find api -name '*.proto' | sort)
PROTOC = PATH="$(PROTO_TOOLS):$$PATH" protoc -I api \
	--go_out=$(1) --go_opt=paths=source_relative \
	--go-grpc_out=$(1) --go-grpc_opt=paths=source_relative \
	$(PROTO_FILES)

proto-tools: ## install the pinned protoc plugins into bin/tools
	@command -v protoc >/dev/null || { echo "make: protoc not found: apt-get install protobuf-compiler libprotobuf-dev" >&2; exit 1; }
	@GOBIN=$(PROTO_TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@GOBIN=$(PROTO_TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

proto: proto-tools ## regenerate the API code (api/) from its .proto files
	$(call PROTOC,api)

proto-check: proto-tools ## fail when the committed API code is stale
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call PROTOC,$$tmp) && \
	for f in $$(cd "$$tmp" && find . -name '*.go'); do \
		diff -u -I '^//[[:space:]]*protoc[[:space:]]' "api/$$f" "$$tmp/$$f" || { echo "make: api/$$f is stale: run make proto" >&2; exit 1; }; \
	done; \
	for f in $$(cd api && find . -name '*.pb.go'); do \
		[ -f "$$tmp/$$f" ] || { echo "make: api/$$f has no .proto left: remove it" >&2; exit 1; }; \
	done

# golangci-lint with the committed .golangci.yml (errcheck, govet,
# ineffassign, staticcheck, unused, gosec, exhaustive, errorlint; api/ is
# generated and skipped). The pinned version is installed into bin/tools
# once, like proto-tools; a binary of another version there is replaced.
# LINTFLAGS passes options (e.g. LINTFLAGS=--concurrency=1 on a shared
# machine).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/bin/tools/golangci-lint
LINTFLAGS ?=

lint: ## golangci-lint with the committed config (.golangci.yml)
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q "version $(GOLANGCI_LINT_VERSION:v%=%) " || \
		GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(GOLANGCI_LINT) run $(LINTFLAGS) ./...

# Unit, fuzz seed corpora and integration tests (the suites under test/ need
# the real daemon: the hostile-workload and misbehaving-daemon suites among
# them), all under the race detector. go test runs packages in parallel (-p,
# the number of CPUs); the suites under test/ take turns (testkit.Main holds
# a lock while a suite's tests run), so only one of them uses the daemon at
# a time, as when they were one package, while the unit packages, and the
# next suite's build, run beside it. go test kills a test binary
# TEST_TIMEOUT plus a minute after it starts, a suite's wait for its turn
# included, so TEST_TIMEOUT still covers test/... as a whole, as it covered
# the one package before. Load and soak take minutes: make load, make soak.
test: fmt-check vet lint tidy-check proto-check helpers-check image image-python kube ## every check and every test (unit and integration, race detector): what CI runs
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# Every test that needs no Docker: every package but those under test/,
# under the race detector, with the daemon's address pointed at nothing and
# CI=true, so a test outside test/ that reaches for Docker fails here rather
# than passing on a machine where a daemon happens to run.
UNIT_PKGS = $$($(GO) list ./... | grep -v '/test\(/\|$$\)')
unit: ## every test that needs no Docker (all but test/...), race detector, about a minute
	CI=true DOCKER_HOST=unix:///nonexistent/stockade-unit.sock $(GO) test -race -count=1 $(UNIT_PKGS)

# go.mod and go.sum say exactly what the code imports.
tidy-check: ## fail when go.mod or go.sum is not tidy
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod or go.sum is not tidy: run go mod tidy" >&2; $(GO) mod tidy -diff >&2; exit 1; }

# The load test (issue 13): 100 sandboxes at once through one server vs the
# raw Docker client; minutes, so not part of make test.
load: build image ## 100 sandboxes at once through one server vs the raw client (minutes)
	CI=true $(GO) test -tags load -count=1 -run 'TestLoad' -v -timeout 30m ./test/load/

# The soak (issue 13): SOAK minutes of random creates, processes, kills
# and runtime kill -9s with restarts, then what was left compared with the
# start.
SOAK ?= 3m
soak: build image ## SOAK minutes of random work and server kill -9s (minutes)
	CI=true STOCKADE_SOAK=$(SOAK) $(GO) test -tags soak -count=1 -run 'TestSoak' -v -timeout 60m ./test/soak/

# The hostile-workload suite (test/hostile): attacks from inside
# sandboxes of a served runtime. Part of make test; this runs it alone.
hostile: image image-python ## the hostile-workload suite alone
	CI=true $(GO) test -race -count=1 -run 'TestHostile' -timeout 20m ./test/hostile/

# A misbehaving daemon (issue 13): the runtime behind a fault-injecting
# proxy (internal/faultproxy) on the real daemon. Part of make test; this
# runs only these tests, under the race detector.
faults: image ## the misbehaving-daemon suite alone
	CI=true $(GO) test -race -count=1 -run 'TestFaults' -timeout 15m ./test/faults/

# Benchmarks beside the code they measure, each against its anchor.
BENCH ?= .
BENCHTIME ?= 1x
bench: image image-devtools ## benchmarks, each against its anchor (BENCH=regexp BENCHTIME=1x), then bench-pool
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem $(BENCHFLAGS) $(PKGS)
	$(MAKE) bench-pool

# Warm pools (issue 21): POOL_CLAIMS claims 10 at a time, each checked clean,
# with their time to first command; then that time warm and cold, embedded
# and served, beside docker run (TTFC_RUNS samples each).
POOL_CLAIMS ?= 200
TTFC_RUNS ?= 30
bench-pool: image ## warm pools: POOL_CLAIMS claims 10 at a time; time to first command vs docker run (minutes)
	CI=true STOCKADE_POOL_CLAIMS=$(POOL_CLAIMS) $(GO) test -count=1 -run '^TestPoolClaims$$' -v -timeout 30m ./test/pool/
	CI=true $(GO) test -count=1 -run '^$$' -bench '^BenchmarkTimeToFirstCommand$$' -benchtime $(TTFC_RUNS)x -timeout 30m ./test/bench/

# The main job: a one-shot sandbox on the embedded defaults, a process in it
# showing the sandbox's identity and limits, its output, then the sandbox's
# journaled history.
run: build image ## the main job: a sandbox, a process, its output, its journaled history
	./bin/stockade run --history -- sh -c "$$(cat scripts/demo.sh)"

# The randomized crash drill: every failpoint, then DRILL_RANDOM kills at
# random moments.
DRILL_RANDOM ?= 20
drill: build image ## the crash drill: every failpoint, then DRILL_RANDOM random kills
	./bin/stockade drill --hostile --random $(DRILL_RANDOM)

# The Kubernetes control plane the node tests run (issue 23): kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl built from the Go module
# proxy at the one release tools/kube/go.mod pins (its staging modules
# replaced by the same release), and Debian's etcd. go build is incremental:
# a second make kube relinks nothing. Cold, on two cores, about 17 minutes.
KUBE_BIN := $(CURDIR)/.build/kube/bin
KUBE_CMDS := kube-apiserver kube-controller-manager kube-scheduler kubectl
kube: ## the control plane's binaries in .build/kube/bin (from the Go module proxy), and etcd
	@command -v etcd >/dev/null || { echo "make: etcd not found: apt-get install etcd-server" >&2; exit 1; }
	cd tools/kube && $(GO) build -o $(KUBE_BIN)/ $(addprefix k8s.io/kubernetes/cmd/,$(KUBE_CMDS))

CLUSTER_DIR ?= $(CURDIR)/.build/cluster
cluster-up: kube ## start the control plane (etcd, API server, controller manager, scheduler) in CLUSTER_DIR
	$(GO) run ./internal/kubecluster/cmd/kubecluster up $(CLUSTER_DIR)

cluster-down: ## stop what cluster-up started
	$(GO) run ./internal/kubecluster/cmd/kubecluster down $(CLUSTER_DIR)

# Issue 23's demonstration: a control plane and three stockade nodes (three
# owners on the one Docker daemon), CLUSTER_PODS sandbox pods spread over
# them, kubectl exec and logs -f, one node killed -9 mid-run and its pods
# re-adopted, everything deleted and nothing left; then its figures against
# the same sandboxes through stockade serve.
CLUSTER_PODS ?= 30
cluster: kube image ## control plane + 3 nodes + CLUSTER_PODS pods, a node killed -9, figures (minutes)
	CI=true STOCKADE_CLUSTER_PODS=$(CLUSTER_PODS) STOCKADE_CLUSTER_FIGURES=1 $(GO) test -count=1 -run '^TestKubeNode(s|WarmPool)$$' -v -timeout 30m ./test/kube/

clean: ## remove bin/ and .build/ (the control plane binaries: a cold make kube takes minutes)
	rm -rf bin .build
