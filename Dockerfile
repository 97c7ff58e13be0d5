# syntax=docker/dockerfile:1
# Build: cgo stays on because go-nvml loads libnvidia-ml at run time through cgo.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/gatekeeper ./cmd/gatekeeper

# Run: a small glibc image (cgo binaries need libc), no shell, non-root.
# On a GPU node the NVIDIA container toolkit mounts libnvidia-ml.so.1 into the container.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/gatekeeper /usr/local/bin/gatekeeper
COPY config.yaml /etc/gatekeeper/config.yaml
USER 65532:65532
# 8080: traffic, /healthz, /readyz. 9090: /metrics, /admin/state (set
# server.admin_listen to ":9090" in the mounted policy to scrape it from outside the pod).
# 8080 traffic (proxy), 9090 admin; 9002 ext_proc and 9003 plaintext gRPC health in endpoint-picker mode
EXPOSE 8080 9090 9002 9003
ENTRYPOINT ["/usr/local/bin/gatekeeper"]
CMD ["-config", "/etc/gatekeeper/config.yaml"]
