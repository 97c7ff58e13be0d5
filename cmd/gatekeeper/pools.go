package main

import (
	"fmt"
	"os"

	"k8s.io/client-go/dynamic"

	"github.com/gatekeeper-dev/gatekeeper/internal/discovery/inferencepool"
)

// kubeClients are the clients the InferencePool watch reads through: one
// dynamic client, for the pools and their pods alike.
type kubeClients struct {
	dynamic dynamic.Interface
}

// newPoolWatcher is the policy's NewPoolWatcher: the watch over the
// injected clients (tests), else in-cluster config or $KUBECONFIG.
func (a *app) newPoolWatcher(refs []inferencepool.Ref, onChange func(inferencepool.Snapshot)) (*inferencepool.Watcher, error) {
	clients := a.opts.kube
	if clients == nil {
		dyn, err := inferencepool.ClientsFromConfig(os.Getenv("KUBECONFIG"))
		if err != nil {
			return nil, fmt.Errorf("gatekeeper: inference_pool: the Kubernetes API: %w", err)
		}
		clients = &kubeClients{dynamic: dyn}
	}
	return inferencepool.New(inferencepool.Options{Dynamic: clients.dynamic, Refs: refs, OnChange: onChange, Logger: a.log})
}
