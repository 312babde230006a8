#!/usr/bin/env bash
# Builds OpenKruise v1.9.0's kruise-manager and kruise-daemon from the source of its v1.9.0 tag into a
# cache outside the repo, for the side-by-side benchmarks only (`make bench-openkruise`:
# `fleet-scale`, `policy-scale` and `daemon-scale --openkruise`); nothing of it ships or runs in
# `make test`. Into $cache/openkruise-v1.9.0 it puts:
#   bin/kruise-manager   built as upstream's Dockerfile builds it (`go build`, CGO off), with one change:
#                        the webhook server listens on 127.0.0.1 instead of every interface (this test
#                        bed listens on loopback only)
#   bin/kruise-daemon    `go build ./cmd/daemon`, CGO off, unchanged
#   image/manager        the tag's kruise-manager with no change at all (its webhook on every interface,
#   image/kruise-daemon  as in a Pod) and kruise-daemon: the two files of upstream's image (its Dockerfile
#                        copies them to /manager and /kruise-daemon), which the takeover lane
#                        (`make test-takeover`) puts into an image and runs from OpenKruise's own chart
#   crd/                 upstream's CRDs (config/crd/bases)
#   webhook.yaml         upstream's webhook configurations as its kustomization names them
#                        (kruise-*-webhook-configuration, Service kruise-system/kruise-webhook-service);
#                        the manager points them at itself (WEBHOOK_HOST) once it runs
#   SOURCE               the digest of the source tree it was built from (below)
# A complete folder built from the tag's source is not rebuilt.
#
# Which source: the module proxy's `github.com/openkruise/kruise@v1.9.0` is not the v1.9.0 tag (the
# checksum database has no entry for it; its zip is commit 4c2bbcec of master, whose CHANGELOG ends
# at v1.8.2), so the source is checked against the digest of the tag's tree (commit
# b1e001a957ce62bf87894d0212f5e704a8e9c2b4, `git archive v1.9.0`): SHA-256 over the sorted
# `sha256sum` lines of every file. The proxy's module is used only if it matches; otherwise
# OPENKRUISE_SRC must name an unpacked copy of the tag (`git archive v1.9.0 | tar -x -C DIR`), which is
# checked the same way. Dependencies come from the module proxy, pinned by the tag's own go.sum.
set -euo pipefail

VERSION=v1.9.0
MODULE=github.com/openkruise/kruise
TAG_COMMIT=b1e001a957ce62bf87894d0212f5e704a8e9c2b4
TAG_TREE_DIGEST=afb1e9ff33d13d6b49d59aa745e3a3ceeb9d6342f25786604e8a43e44467634e
cache="${KRUISE_RS_CACHE:-$HOME/.cache/kruise-rs}"
out="$cache/openkruise-$VERSION"

tree_digest() {
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

if [[ -x "$out/bin/kruise-manager" && -x "$out/bin/kruise-daemon" && -f "$out/webhook.yaml" &&
      -x "$out/image/manager" && -x "$out/image/kruise-daemon" &&
      -d "$out/crd" && "$(cat "$out/SOURCE" 2>/dev/null)" == "$TAG_TREE_DIGEST" ]]; then
  echo "openkruise: $VERSION in $out"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# The checksum database does not list this module (see above); the tree digest stands in for it, and
# its own go.sum pins every dependency it builds with.
export GONOSUMDB="$MODULE"
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy || true

module_dir=""
if [[ -z "${OPENKRUISE_SRC:-}" ]]; then
  # `go mod download -json` prints whole, never piped into a reader that may exit early (pipefail).
  info="$(go mod download -json "$MODULE@$VERSION" || true)"
  module_dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")"
  if [[ ! -d "$module_dir" || "$(tree_digest "$module_dir")" != "$TAG_TREE_DIGEST" ]]; then
    cat >&2 <<EOF
openkruise: the module proxy's $MODULE@$VERSION is not the $VERSION tag's source
  (its tree digest is not $TAG_TREE_DIGEST; origin: $(tr -d '\n\t' <<<"$info" | sed -n 's/.*"Origin": \({[^}]*}\).*/\1/p'))
Set OPENKRUISE_SRC to an unpacked copy of the tag (commit $TAG_COMMIT), e.g.
  git -C <a clone of $MODULE> archive $VERSION | tar -x -C /tmp/kruise-$VERSION
  OPENKRUISE_SRC=/tmp/kruise-$VERSION make openkruise
EOF
    exit 1
  fi
else
  module_dir="$OPENKRUISE_SRC"
  digest="$(tree_digest "$module_dir")"
  if [[ "$digest" != "$TAG_TREE_DIGEST" ]]; then
    echo "openkruise: $module_dir is not the $VERSION tag's source (tree digest $digest, want $TAG_TREE_DIGEST)" >&2
    exit 1
  fi
fi

echo "openkruise: building kruise-manager and kruise-daemon $VERSION (tag source $module_dir) into $out" >&2
# Built beside the cache and swapped in at the end: a bench reading the old folder is not cut short.
next="$out.next"
rm -rf "$next"
src="$next/src"
mkdir -p "$next/bin" "$next/crd" "$next/image"
cp -r "$module_dir" "$src"
chmod -R u+w "$src"

# The image's manager first, from the source as it is.
(cd "$src" && go build -o "$next/image/manager" .)

listen='Host:    "0.0.0.0",'
grep -qF "$listen" "$src/main.go" || { echo "openkruise: main.go no longer sets $listen" >&2; exit 1; }
sed -i "s/Host:    \"0.0.0.0\",/Host:    \"127.0.0.1\",/" "$src/main.go"

(cd "$src" && go build -o "$next/bin/kruise-manager" . && go build -o "$next/bin/kruise-daemon" ./cmd/daemon)
cp "$next/bin/kruise-daemon" "$next/image/kruise-daemon"

cp "$src"/config/crd/bases/*.yaml "$next/crd/"
sed -e 's/^  name: mutating-webhook-configuration$/  name: kruise-mutating-webhook-configuration/' \
    -e 's/^  name: validating-webhook-configuration$/  name: kruise-validating-webhook-configuration/' \
    -e 's/^      name: webhook-service$/      name: kruise-webhook-service/' \
    -e 's/^      namespace: system$/      namespace: kruise-system/' \
    "$src/config/webhook/manifests.yaml" >"$next/webhook.yaml"
for want in kruise-mutating-webhook-configuration kruise-validating-webhook-configuration; do
  grep -q "name: $want\$" "$next/webhook.yaml" || { echo "openkruise: $want missing" >&2; exit 1; }
done
rm -rf "$src"
echo "$TAG_TREE_DIGEST" >"$next/SOURCE"
rm -rf "$out"
mv "$next" "$out"
echo "openkruise: $VERSION in $out"
