//go:build tools

// Package tools pins the Kubernetes test engines that scripts/tools.sh builds:
// kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver), kube-controller-manager
// (k8s.io/kubernetes/cmd/kube-controller-manager: the garbage collector and the
// ResourceQuota controller the envtest harness runs), kubectl
// (k8s.io/kubernetes/cmd/kubectl: the client users type, which tests drive) and
// etcd (go.etcd.io/etcd/server/v3, whose main package is the etcd server).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
