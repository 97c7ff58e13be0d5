#!/usr/bin/env bash
# Installs kustomize (deploy's tests build deploy/kubernetes with it, as
# `kubectl apply -k` does) from the Go module proxy into $(go env
# GOPATH)/bin, unless it is there already. v5.8.1: later ones need Go 1.27.
set -euo pipefail
version=v5.8.1
bin="$(go env GOBIN)"
bin="${bin:-$(go env GOPATH)/bin}"
if [ -x "$bin/kustomize" ] && go version -m "$bin/kustomize" | grep -q "sigs.k8s.io/kustomize/kustomize/v5[[:space:]]*$version"; then
	exit 0
fi
GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kustomize/kustomize/v5@$version"
go version -m "$bin/kustomize" | grep "^[[:space:]]*mod[[:space:]]*sigs.k8s.io/kustomize/kustomize/v5"
