# The manager image. Build with `make docker-build` on a host with a Docker engine; without one,
# `make image-context` assembles this build context as Docker would and builds the manager in it.
FROM golang:1.26 AS build
WORKDIR /src
# The modules first, in a layer of their own: it is rebuilt only when go.mod or go.sum changes.
COPY go.mod go.sum ./
RUN go mod download
# Then the whole context: .dockerignore leaves out only what the build never reads, so every
# package the manager imports is here without being listed.
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
