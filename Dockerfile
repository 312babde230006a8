# kruise-manager and kruise-daemon images for those with a Docker (or BuildKit/Podman) builder. `make image`
# writes the same images — a scratch root holding /etc/passwd, /etc/group and the static binary at
# /kruise-manager (or /kruise-daemon), run as UID/GID 65532 — as OCI archives without any daemon
# (crates/image). The daemon's image is its own (the chart's `daemon.image`): the DaemonSet pulls it onto
# every node, so it carries only the daemon.
#
#   docker build -t kruise-rs/kruise-manager:0.1.0 .
#   docker build --target daemon -t kruise-rs/kruise-daemon:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/kruise-manager:0.1.0 --push .

# ---- build: a static musl binary. ring's C and assembly are compiled by the host's cc for the musl
# target (no musl-gcc needed); Rust links musl's self-contained C runtime statically.
FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS build
ARG TARGETARCH
WORKDIR /src
RUN case "$TARGETARCH" in \
      amd64) echo x86_64-unknown-linux-musl > /target ;; \
      arm64) echo aarch64-unknown-linux-musl > /target; apt-get update && apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu ;; \
      *) echo "unsupported architecture $TARGETARCH" >&2; exit 1 ;; \
    esac && rustup target add "$(cat /target)"
COPY . .
RUN target="$(cat /target)" \
 && export CC_x86_64_unknown_linux_musl=cc \
           CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc \
           CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc \
           CARGO_PROFILE_DIST_STRIP=symbols \
 && cargo build --profile dist --locked --target "$target" -p kruise-manager -p kruise-daemon \
 && mkdir -p /rootfs/etc /daemonfs \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group \
 && cp -r /rootfs/etc /daemonfs/etc \
 && cp "target/$target/dist/kruise-manager" /rootfs/kruise-manager \
 && cp "target/$target/dist/kruise-daemon" /daemonfs/kruise-daemon

# ---- kruise-daemon (`--target daemon`): nothing but its binary. The chart runs it as root (the runtime
# socket is root's).
FROM scratch AS daemon
COPY --from=build /daemonfs/ /
USER 65532:65532
EXPOSE 10221
ENTRYPOINT ["/kruise-daemon"]

# ---- kruise-manager (the default target): nothing but the binary; no shell, no libc, no package manager.
FROM scratch AS manager
COPY --from=build /rootfs/ /
USER 65532:65532
EXPOSE 8000 8080 9876
ENTRYPOINT ["/kruise-manager"]
