# The manager image. Build with `make docker-build` on a host with a Docker engine.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY remote/ remote/
COPY netpol/ netpol/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
