# kruise-rs — the two commands a newcomer needs are `make run` and `make test`.

SHELL := /bin/bash
CARGO ?= cargo
export KRUISE_RS_CACHE ?= $(HOME)/.cache/kruise-rs

.PHONY: run test test-install test-takeover fuzz control-plane helm real-node openkruise image build manifests lint fmt bench bench-openkruise soak clean-local

## run: build what is missing, then start a local cluster (real control plane + simulated nodes).
## kruise-manager runs with OpenKruise's default gates plus RUN_FEATURE_GATES, the gates the files in
## examples/ need (ImagePullJobGate: ImagePullJob and ImageListPullJob); it prints the gates it runs with.
RUN_FEATURE_GATES ?= ImagePullJobGate=true
run: control-plane
	$(CARGO) build -p kruise-testkit -p kruise-manager -p kruise-daemon --bins
	./target/debug/kruise-local up --manager-arg=--feature-gates=$(RUN_FEATURE_GATES)

## test: build what is missing, then run every test: unit and end-to-end (real control plane), the
## real-node lane included (real kubelets with containerd: tests/real_node.rs).
## The build selects every target, as the test run does, so both resolve the same features (the test
## targets' dev-dependencies add some, e.g. tokio's test-util): the binaries the tests start are built once,
## not a second time with other features (about 1.5 GiB of target/ and minutes on 2 cores).
test: control-plane helm real-node
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace --all-targets --no-fail-fast

## test-install: the installed lane (tests/installed.rs: helm install of the chart on real nodes) on
## `make image`'s static release images, what users pull, instead of the debug build's that `make test`
## pushes; the release build takes about 23 minutes on 2 cores.
test-install: control-plane helm real-node image
	$(CARGO) build --workspace --bins
	KRUISE_RS_IMAGE_DIR=$(abspath $(or $(CARGO_TARGET_DIR),target)) $(CARGO) test -p kruise-e2e --test installed -- --nocapture

## test-takeover: the takeover lane (tests/installed_takeover.rs): OpenKruise v1.9.0 installed on real
## nodes from its released chart and its own image, built from the tag's source by `make openkruise`
## (about 10 minutes on 2 cores; OPENKRUISE_SRC names an unpacked copy of the tag when the module
## proxy's source is not the tag's), objects of every kind, then `kubectl kruise takeover` to kruise-rs's
## chart: nothing lost, no Pod written, kruise-rs's Pods serving. `make test` skips it (ignored there).
test-takeover: control-plane helm real-node openkruise
	$(CARGO) build --workspace --bins
	$(CARGO) test -p kruise-e2e --test installed -- --ignored --nocapture

## fuzz: a long fuzzing run (proptest) of every webhook handler, /convert and the expression and quantity
## parsers; `make test` runs the same properties with few cases. Prints the cases and executions.
FUZZ_CASES ?= 5000
fuzz:
	KRUISE_FUZZ_CASES=$(FUZZ_CASES) $(CARGO) test -p kruise-webhook --test fuzz -- --nocapture --test-threads=2

## control-plane: build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (v1.34.10) and
## etcd (3.6.4) from their Go modules into $(KRUISE_RS_CACHE); skips binaries already built.
control-plane:
	tools/build-control-plane.sh

## real-node: what real nodes need (`kruise-local up --real-nodes N`, tests/real_node.rs): installs the
## Debian packages containerd, runc, containernetworking-plugins, busybox-static, docker-registry and
## iptables when missing (root), and builds the kubelet and kube-proxy (v1.34.10) from their Go module
## into $(KRUISE_RS_CACHE); cached.
real-node:
	tools/build-real-node.sh

## helm: build the Helm CLI (v3.22.0) from its Go module into $(KRUISE_RS_CACHE)/helm-v3.22.0/bin; cached.
helm:
	tools/build-helm.sh

## openkruise: build OpenKruise v1.9.0's kruise-manager and kruise-daemon, CRDs and webhook
## configurations from the v1.9.0 tag's source (checked by digest; the module proxy's "v1.9.0" is not
## the tag: OPENKRUISE_SRC=<unpacked tag> then) into $(KRUISE_RS_CACHE)/openkruise-v1.9.0, for
## `make bench-openkruise` only; cached.
openkruise:
	tools/build-openkruise.sh

## image: static (musl) release kruise-manager and kruise-daemon, each in its own scratch image, written
## as OCI image layout archives without a container daemon (target/kruise-manager-image.tar and
## target/kruise-daemon-image.tar; `docker load`, `podman load`, `skopeo copy oci-archive:...` read
## them), then checked: digests, entrypoint, non-root user, static, `--version`, size < 30 MiB. The
## daemon has its own image because the chart's DaemonSet pulls it onto every node: it carries only the
## daemon. The Dockerfile builds the same images where a Docker daemon exists (`--target daemon`).
IMAGE_TARGET ?= x86_64-unknown-linux-musl
IMAGE_ARCH ?= amd64
IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE_REF ?= kruise-rs/kruise-manager:$(IMAGE_VERSION)
IMAGE_OUT ?= $(or $(CARGO_TARGET_DIR),target)/kruise-manager-image.tar
DAEMON_IMAGE_REF ?= kruise-rs/kruise-daemon:$(IMAGE_VERSION)
DAEMON_IMAGE_OUT ?= $(or $(CARGO_TARGET_DIR),target)/kruise-daemon-image.tar
IMAGE_BIN = $(or $(CARGO_TARGET_DIR),target)/$(IMAGE_TARGET)/dist
image:
	rustup target list --installed | grep -qx $(IMAGE_TARGET) || rustup target add $(IMAGE_TARGET)
	CC_$(subst -,_,$(IMAGE_TARGET))=$${CC_$(subst -,_,$(IMAGE_TARGET)):-cc} CARGO_PROFILE_DIST_STRIP=symbols \
	  $(CARGO) build --profile dist --locked --target $(IMAGE_TARGET) -p kruise-manager -p kruise-daemon
	$(CARGO) run -q --release -p kruise-image -- build --binary $(IMAGE_BIN)/kruise-manager \
	  --out $(IMAGE_OUT) --reference $(IMAGE_REF) --architecture $(IMAGE_ARCH)
	$(CARGO) run -q --release -p kruise-image -- check $(IMAGE_OUT) --require-static --max-mib 30
	$(CARGO) run -q --release -p kruise-image -- build --name kruise-daemon --binary $(IMAGE_BIN)/kruise-daemon \
	  --out $(DAEMON_IMAGE_OUT) --reference $(DAEMON_IMAGE_REF) --architecture $(IMAGE_ARCH)
	$(CARGO) run -q --release -p kruise-image -- check $(DAEMON_IMAGE_OUT) --name kruise-daemon --require-static --max-mib 30

build:
	$(CARGO) build --workspace --all-targets

## manifests: regenerate config/crd and config/webhook from the Rust types, and the charts' copies of the
## CRDs (tests fail when they are stale).
manifests:
	$(CARGO) run -q -p kruise-api --bin crdgen -- config/crd
	rm -f charts/kruise-rs/crds/*.yaml charts/kruise-rs-crds/files/*.yaml
	cp config/crd/*.yaml charts/kruise-rs/crds/
	cp config/crd/*.yaml charts/kruise-rs-crds/files/
	$(CARGO) run -q -p kruise-webhook --bin manifests -- config/webhook/manifests.yaml

## lint: formatting and clippy with warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## bench: scale figures of the test bed, of a 1,000-Pod CloneSet rollout, of a 1,000-Pod Advanced
## StatefulSet (and Kubernetes' StatefulSet beside it), of SidecarSet injection and upgrade and of a
## BroadcastJob and an Advanced DaemonSet (with Kubernetes' DaemonSet beside it) on 300 nodes, and of a
## 1,000-replica UnitedDeployment over 3 CloneSet subsets, of the policy webhooks (Pod creates with
## SidecarSets, WorkloadSpreads and budgets matching; a 100-Pod eviction drain), of one manager over
## 10,000 Pods, of the node agent (kruise-daemon idle, pulling 10 images, running 100 probes, CRR
## latency, on one real node: root and `make real-node`), and of the pure planners on 10k/100k-Pod
## snapshots (prints numbers, asserts nothing about time).
## The benches run the kruise-manager that ships: the `dist` profile (Cargo.toml), which `make image` builds.
bench: export KRUISE_MANAGER_BIN = $(abspath $(or $(CARGO_TARGET_DIR),target))/dist/kruise-manager
bench: control-plane real-node
	$(CARGO) build --profile dist -p kruise-manager
	$(CARGO) run --release -p kruise-benches --bin planner-scale
	$(CARGO) run --release -p kruise-benches --bin testbed-scale
	$(CARGO) run --release -p kruise-benches --bin cloneset-scale
	$(CARGO) run --release -p kruise-benches --bin statefulset-scale
	$(CARGO) run --release -p kruise-benches --bin sidecarset-scale
	$(CARGO) run --release -p kruise-benches --bin policy-scale
	$(CARGO) run --release -p kruise-benches --bin broadcastjob-scale
	$(CARGO) run --release -p kruise-benches --bin uniteddeployment-scale
	$(CARGO) run --release -p kruise-benches --bin daemonset-scale
	$(CARGO) run --release -p kruise-benches --bin fleet-scale
	$(CARGO) build --profile dist -p kruise-daemon
	KRUISE_DAEMON_BIN=$(abspath $(or $(CARGO_TARGET_DIR),target))/dist/kruise-daemon \
		$(CARGO) run --release -p kruise-benches --bin daemon-scale

## bench-openkruise: fleet-scale's 10,000 Pods and policy-scale's webhook figures with OpenKruise
## v1.9.0's manager instead of kruise-rs's, and daemon-scale's node-agent figures with OpenKruise
## v1.9.0's kruise-daemon, the same fleet, load and figures, for the side-by-side
## figures of docs/sizing.md (FLEET_ARGS: more fleet-scale arguments, e.g. `--no-floor --restarts 1`).
bench-openkruise: control-plane real-node openkruise
	$(CARGO) run --release -p kruise-benches --bin fleet-scale -- \
		--openkruise $(KRUISE_RS_CACHE)/openkruise-v1.9.0 $(FLEET_ARGS)
	$(CARGO) run --release -p kruise-benches --bin policy-scale -- \
		--openkruise $(KRUISE_RS_CACHE)/openkruise-v1.9.0
	$(CARGO) build --release -p kruise-manager
	$(CARGO) run --release -p kruise-benches --bin daemon-scale -- \
		--openkruise $(KRUISE_RS_CACHE)/openkruise-v1.9.0

## soak: the tests that once stalled (UnitedDeployment's subsets, the CloneSet suite) run SOAK_RUNS
## times in a row (20 by default), each run on a fresh control plane; stops at the first failure and
## prints the run it failed in. Not part of `make test` (about 20 minutes a run on 2 cores).
SOAK_RUNS ?= 20
soak: control-plane
	$(CARGO) build -p kruise-manager -p kubelet-sim
	$(CARGO) test -p kruise-e2e --test uniteddeployment --test workloads --no-run
	@for i in $$(seq 1 $(SOAK_RUNS)); do \
		echo "== soak run $$i of $(SOAK_RUNS)"; \
		$(CARGO) test -p kruise-e2e --test uniteddeployment || { echo "soak: failed in run $$i"; exit 1; }; \
		$(CARGO) test -p kruise-e2e --test workloads cloneset:: || { echo "soak: failed in run $$i"; exit 1; }; \
	done; echo "soak: $(SOAK_RUNS) runs green"

clean-local:
	rm -rf .local
