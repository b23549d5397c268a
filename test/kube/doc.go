// Package kube proves stockade-node on a real Kubernetes control plane:
// three nodes (three owners on the one daemon), sandbox pods scheduled and
// run, kubectl exec, attach and logs -f through the nodes' kubelet APIs, a
// node killed -9 and its pods re-adopted, and nothing left at the end
// (nodes_test.go). `make cluster` runs it at scale with figures.
//
// It needs Docker, the sandbox image and the control plane's binaries (make
// kube; Debian's etcd): under CI=true a missing one fails the test,
// elsewhere it is skipped saying how to build it.
package kube
