#!/usr/bin/env bash
# Builds the Helm CLI (v3.22.0, pinned in tools/helm/go.mod) from its Go module into the same cache as the
# control plane ($KRUISE_RS_CACHE/helm-<version>/bin/helm); an existing binary of the right version is kept.
# The chart tests (helm lint, helm template golden files, the install e2e) run this first.
set -euo pipefail

HELM_VERSION=v3.22.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KRUISE_RS_CACHE:-$HOME/.cache/kruise-rs}"
out="$cache/helm-$HELM_VERSION/bin"
mkdir -p "$out"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy || true

# The version is captured whole (see build-control-plane.sh: no early-exiting reader under pipefail).
if got="$("$out/helm" version --template '{{.Version}}' 2>/dev/null)" && [[ "$got" == "$HELM_VERSION" ]]; then
  echo "helm: $got in $out"
  exit 0
fi

echo "helm: building $HELM_VERSION into $out" >&2
(cd "$here/helm" && go build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
  -o "$out/helm" helm.sh/helm/v3/cmd/helm)
echo "helm: $("$out/helm" version --template '{{.Version}}') in $out"
