#!/usr/bin/env bash
# Installs Helm (deploy's tests lint and render deploy/helm/gatekeeper with
# it) from the Go module proxy into $(go env GOPATH)/bin, unless it is there
# already. The tests find it on PATH or in that folder.
set -euo pipefail
version=v3.22.0
# The Kubernetes minor of the k8s.io modules helm $version builds with
# (k8s.io/client-go v0.37): a plain go install would leave the default
# cluster version at 1.20, as helm's Makefile sets these with -ldflags.
k8s_minor=37
bin="$(go env GOBIN)"
bin="${bin:-$(go env GOPATH)/bin}"
if [ -x "$bin/helm" ] && go version -m "$bin/helm" | grep -q "helm.sh/helm/v3[[:space:]]*$version"; then
	exit 0
fi
ldflags="-X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
GOFLAGS=-buildvcs=false go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version"
"$bin/helm" version --short
