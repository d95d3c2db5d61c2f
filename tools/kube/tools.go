//go:build tools

// Package tools pins the Kubernetes test engines that scripts/tools.sh builds:
// kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver) and etcd
// (go.etcd.io/etcd/server/v3, whose main package is the etcd server).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
