#!/usr/bin/env bash
# What real nodes of the test bed need (`kruise-local up --real-nodes N`, the real-node tests):
#  - the Debian packages containerd, runc, containernetworking-plugins, busybox-static and
#    docker-registry, iptables, installed with apt-get when a program is missing (needs root);
#  - a kubelet and a kube-proxy v1.34.10 built from the same Go module as the control plane, into the
#    same cache (kube-proxy runs in each node's network namespace when a test bed opts into in-cluster
#    networking).
# Idempotent: nothing is installed or built twice.
set -euo pipefail

K8S_VERSION=v1.34.10
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KRUISE_RS_CACHE:-$HOME/.cache/kruise-rs}"
out="$cache/k8s-$K8S_VERSION/bin"
mkdir -p "$out"

# program -> Debian package
declare -A packages=(
  [containerd]=containerd
  [runc]=runc
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [/bin/busybox]=busybox-static
  [docker-registry]=docker-registry
  [nsenter]=util-linux
  [ip]=iproute2
  [iptables]=iptables
)
missing=()
for program in "${!packages[@]}"; do
  if [[ "$program" == /* ]]; then
    [[ -x "$program" ]] || missing+=("${packages[$program]}")
  else
    command -v "$program" >/dev/null 2>&1 || [[ -x "/usr/sbin/$program" || -x "/sbin/$program" ]] \
      || missing+=("${packages[$program]}")
  fi
done
# busybox-static, not the dynamic busybox: the test images are one static binary and symlinks.
if [[ -x /bin/busybox ]] && ldd /bin/busybox >/dev/null 2>&1; then
  missing+=(busybox-static)
fi
if ((${#missing[@]})); then
  echo "real-node: installing ${missing[*]}" >&2
  if [[ $(id -u) -ne 0 ]]; then
    echo "real-node: root is needed to install packages and to run real nodes" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The Debian package starts a system containerd (and docker-registry): the test bed runs its own, one
# per node, so the system ones are not needed. They are left alone if the machine already ran them.

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy || true
# Both from one `go build` when both are missing, so the packages they share compile once.
build=()
for cmd in kubelet kube-proxy; do
  got="$("$out/$cmd" --version 2>/dev/null || true)"
  [[ "$got" == *"$K8S_VERSION"* ]] || build+=("k8s.io/kubernetes/cmd/$cmd")
done
if ((${#build[@]})); then
  echo "real-node: building ${build[*]##*/} $K8S_VERSION into $out" >&2
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/k8s-bins" && go build -trimpath -tags notest -ldflags "$ldflags" -o "$out/" "${build[@]}")
fi
for cmd in kubelet kube-proxy; do
  got="$("$out/$cmd" --version)"
  [[ "$got" == *"$K8S_VERSION"* ]] || { echo "real-node: $out/$cmd is $got, not $K8S_VERSION" >&2; exit 1; }
  echo "$got"
done
echo "real-node: containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}')"
