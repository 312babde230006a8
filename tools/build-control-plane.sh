#!/usr/bin/env bash
# Builds the real Kubernetes control plane used by the test bed (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl at v1.34.10 and etcd 3.6.4) from their Go modules into a cache outside the repo.
# Binaries that are already present with the right version are not rebuilt.
set -euo pipefail

K8S_VERSION=v1.34.10
ETCD_VERSION=3.6.4
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KRUISE_RS_CACHE:-$HOME/.cache/kruise-rs}"
out="$cache/k8s-$K8S_VERSION/bin"
mkdir -p "$out"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy || true

# Version output is captured whole, never piped into a reader that may exit early: with pipefail, a
# `grep -q` or `head` that closes the pipe first makes the writer die of SIGPIPE (exit 141).
have() { # have <binary> <expected version substring> <version args...>
  local bin="$out/$1" want="$2" got; shift 2
  [[ -x "$bin" ]] || return 1
  got="$("$bin" "$@" 2>/dev/null)" || return 1
  [[ "$got" == *"$want"* ]]
}

k8s_missing=()
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  have "$b" "$K8S_VERSION" --version || k8s_missing+=("k8s.io/kubernetes/cmd/$b")
done
have kubectl "$K8S_VERSION" version --client || k8s_missing+=("k8s.io/kubernetes/cmd/kubectl")

if ((${#k8s_missing[@]})); then
  echo "control-plane: building ${k8s_missing[*]##*/} $K8S_VERSION into $out" >&2
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/k8s-bins" && go build -trimpath -tags notest -ldflags "$ldflags" -o "$out/" "${k8s_missing[@]}")
fi

if ! have etcd "etcd Version: $ETCD_VERSION" --version; then
  echo "control-plane: building etcd $ETCD_VERSION into $out" >&2
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
fi

"$out/kube-apiserver" --version
etcd_version="$("$out/etcd" --version)"
echo "${etcd_version%%$'\n'*}"
echo "control-plane: binaries in $out"
