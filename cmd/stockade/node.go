package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/stockade/stockade/spec"
)

// nodeProgram is the program `stockade node` runs: the Kubernetes node
// (package kubenode) is a binary of its own, so the Kubernetes client
// libraries' initialisation (tens of milliseconds) is not paid by every
// other command.
const nodeProgram = "stockade-node"

const nodeUsage = "stockade node --kubeconfig FILE [--name N] [--listen ADDR] [--address IP] [--tls-cert F --tls-key F] [--client-ca F] [--max-pods N] [--cpus N] [--memory Q] [--reserved cpu=N,memory=Q] [--pool NAME=KEY=VALUE,...,size=N]... [--socket PATH] [-v]"

// nodeCmd is `stockade node ...`: it replaces this process with
// stockade-node (found beside this binary, else on PATH), the global
// --journal and --profile passed on.
type nodeCmd struct {
	g    global
	args []string
}

func parseNode(g global, args []string) (command, error) {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return nil, flag.ErrHelp // the usage is this binary's; the node's own parse checks the rest
		}
	}
	return &nodeCmd{g: g, args: args}, nil
}

func (c *nodeCmd) execute(_ context.Context, _ io.Reader, _, stderr io.Writer) int {
	path, err := findNodeProgram()
	if err != nil {
		return fail(stderr, err, 1)
	}
	argv := []string{nodeProgram}
	if c.g.journal != "" {
		argv = append(argv, "--journal", c.g.journal)
	}
	if c.g.profile != "" {
		argv = append(argv, "--profile", c.g.profile)
	}
	argv = append(argv, c.args...)
	err = syscall.Exec(path, argv, os.Environ())
	return fail(stderr, spec.Wrap(spec.CodeInternal, "node", err, "running %s", path), 1)
}

func findNodeProgram() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), nodeProgram)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(nodeProgram); err == nil {
		return p, nil
	}
	return "", spec.Errorf(spec.CodeUnsupported, "node",
		"%s is not installed beside stockade or on PATH: go install github.com/stockade/stockade/cmd/%s@<this version> (or make build). It is a program of its own so that the Kubernetes libraries' start-up cost is not every command's", nodeProgram, nodeProgram)
}
