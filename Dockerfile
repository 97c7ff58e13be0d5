# syntax=docker/dockerfile:1

# gatekeeper's image, in two variants:
#   docker build -t gatekeeper .                              the default: a static binary (no cgo)
#   docker build --build-arg VARIANT=nvml -t gatekeeper:nvml .  with NVML (kind: nvml): cgo, glibc
# The default has no NVML: gatekeeper rarely runs on a GPU node, and there the DCGM exporter
# (kind: dcgm) and the allocator exporter (kind: memory_blocks) carry the same facts. The nvml
# variant is built with the nvml build tag and needs the NVIDIA container toolkit to mount
# libnvidia-ml.so.1 into the container (docs/sources.md).
#
# Base images are pinned by digest (each one seen pinned in several public Dockerfiles when it
# was written here); scripts/pin-images.sh (network, docker buildx) moves them to the digests
# their tags name now.
ARG VARIANT=static
ARG VERSION=dev

# Build: the source is bind-mounted, not copied, and Go's module and build caches are BuildKit
# cache mounts, so a rebuild compiles only what changed (.dockerignore sends only the sources).
FROM golang:1.26-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
WORKDIR /src

FROM build AS build-static
ARG VERSION
RUN --mount=type=bind,target=. \
    --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
    -o /out/gatekeeper ./cmd/gatekeeper

FROM build AS build-nvml
ARG VERSION
# go-nvml loads libnvidia-ml at run time through cgo; the flag silences NVIDIA's header.
RUN --mount=type=bind,target=. \
    --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
    go build -tags nvml -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
    -o /out/gatekeeper ./cmd/gatekeeper

# Run: distroless, no shell, non-root (65532). static has CA certificates and tzdata but no
# libc; base adds glibc, which the cgo binary needs.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639 AS run-static
FROM gcr.io/distroless/base-debian12:nonroot@sha256:8b9f2e503e55aff85b79d6b22c7a63a65170e8698ae80de680e3f5ea600977bf AS run-nvml

FROM build-${VARIANT} AS binary

FROM run-${VARIANT}
COPY --from=binary /out/gatekeeper /usr/local/bin/gatekeeper
COPY internal/config/default.yaml /etc/gatekeeper/config.yaml
USER 65532:65532
# 8080: traffic, /healthz, /readyz. 9090: /metrics, /admin/state (set server.admin_listen to
# ":9090" in the mounted policy to scrape it from outside the pod). In endpoint-picker mode,
# 9002: ext_proc and 9003: plaintext gRPC health.
EXPOSE 8080 9090 9002 9003
ENTRYPOINT ["/usr/local/bin/gatekeeper"]
CMD ["-config", "/etc/gatekeeper/config.yaml"]
