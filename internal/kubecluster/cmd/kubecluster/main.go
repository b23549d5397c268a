// Command kubecluster starts and stops the test control plane (package
// kubecluster) for `make cluster-up` and `make cluster-down`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/stockade/stockade/internal/kubecluster"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "up" && os.Args[1] != "down" {
		fmt.Fprintln(os.Stderr, "usage: kubecluster up|down DIR")
		os.Exit(2)
	}
	dir := os.Args[2]
	if os.Args[1] == "down" {
		if err := kubecluster.StopDir(dir); err != nil {
			fmt.Fprintln(os.Stderr, "kubecluster:", err)
			os.Exit(1)
		}
		fmt.Println("kubecluster: stopped the control plane in", dir)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "kubecluster:", err)
		os.Exit(1)
	}
	c, err := kubecluster.Start(ctx, dir, kubecluster.Options{Detach: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubecluster:", err)
		os.Exit(1)
	}
	// Kubeconfigs for three nodes, to start by hand (docs/kubernetes.md).
	for i := 1; i <= 3; i++ {
		if _, err := c.NodeKubeconfig(fmt.Sprintf("stockade-%d", i)); err != nil {
			fmt.Fprintln(os.Stderr, "kubecluster:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("kubecluster: the control plane runs (API server %s)\n  export KUBECONFIG=%s\n  bin/stockade-node --kubeconfig %s/node-stockade-1.kubeconfig --name stockade-1 --listen 127.0.0.1:10250 --journal /tmp/stockade-1/journal.db -v &\n  %s/kubectl get nodes\n  make cluster-down\n", c.Server, c.Admin, dir, c.Bin)
}
