#!/usr/bin/env bash
# Installs kubeconform (validates deploy/kubernetes in deploy's tests) from
# the Go module proxy into $(go env GOPATH)/bin, unless it is there already.
# The tests find it on PATH or in that folder.
set -euo pipefail
version=v0.8.0
bin="$(go env GOBIN)"
bin="${bin:-$(go env GOPATH)/bin}"
# go install leaves no version for -v to print; the build info has it.
if [ -x "$bin/kubeconform" ] && go version -m "$bin/kubeconform" | grep -q "github.com/yannh/kubeconform[[:space:]]*$version"; then
	exit 0
fi
GOFLAGS=-buildvcs=false go install "github.com/yannh/kubeconform/cmd/kubeconform@$version"
go version -m "$bin/kubeconform" | grep "^[[:space:]]*mod[[:space:]]*github.com/yannh/kubeconform"
