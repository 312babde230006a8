#!/usr/bin/env bash
# Builds OpenKruise v1.9.0's kruise-manager from its Go module into a cache outside the repo, for the
# side-by-side benchmark only (`make bench-openkruise`: `fleet-scale --openkruise`); nothing of it ships
# or runs in `make test`. Into $cache/openkruise-v1.9.0 it puts:
#   bin/kruise-manager   built as upstream's Dockerfile builds it (`go build`, CGO off), with one change:
#                        the webhook server listens on 127.0.0.1 instead of every interface (this test
#                        bed listens on loopback only)
#   crd/                 upstream's CRDs (config/crd/bases)
#   webhook.yaml         upstream's webhook configurations as its kustomization names them
#                        (kruise-*-webhook-configuration, Service kruise-system/kruise-webhook-service);
#                        the manager points them at itself (WEBHOOK_HOST) once it runs
# A complete folder is not rebuilt.
set -euo pipefail

VERSION=v1.9.0
MODULE=github.com/openkruise/kruise
cache="${KRUISE_RS_CACHE:-$HOME/.cache/kruise-rs}"
out="$cache/openkruise-$VERSION"

if [[ -x "$out/bin/kruise-manager" && -f "$out/webhook.yaml" && -d "$out/crd" ]]; then
  echo "openkruise: $VERSION in $out"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# The module proxy's checksum database does not list this module; its own go.sum pins every
# dependency it builds with.
export GONOSUMDB="$MODULE"
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy || true

echo "openkruise: building kruise-manager $VERSION into $out" >&2
# `go mod download -json` prints whole, never piped into a reader that may exit early (pipefail).
info="$(go mod download -json "$MODULE@$VERSION")"
module_dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")"
[[ -d "$module_dir" ]] || { echo "openkruise: no module folder in: $info" >&2; exit 1; }

rm -rf "$out"
src="$out/src"
mkdir -p "$out/bin" "$out/crd"
cp -r "$module_dir" "$src"
chmod -R u+w "$src"

listen='Host:    "0.0.0.0",'
grep -qF "$listen" "$src/main.go" || { echo "openkruise: main.go no longer sets $listen" >&2; exit 1; }
sed -i "s/Host:    \"0.0.0.0\",/Host:    \"127.0.0.1\",/" "$src/main.go"

(cd "$src" && go build -o "$out/bin/kruise-manager" .)

cp "$src"/config/crd/bases/*.yaml "$out/crd/"
sed -e 's/^  name: mutating-webhook-configuration$/  name: kruise-mutating-webhook-configuration/' \
    -e 's/^  name: validating-webhook-configuration$/  name: kruise-validating-webhook-configuration/' \
    -e 's/^      name: webhook-service$/      name: kruise-webhook-service/' \
    -e 's/^      namespace: system$/      namespace: kruise-system/' \
    "$src/config/webhook/manifests.yaml" >"$out/webhook.yaml"
for want in kruise-mutating-webhook-configuration kruise-validating-webhook-configuration; do
  grep -q "name: $want\$" "$out/webhook.yaml" || { echo "openkruise: $want missing" >&2; exit 1; }
done
rm -rf "$src"
echo "openkruise: $VERSION in $out"
