# syntax=docker/dockerfile:1
# cdc-router and cdc-router-demo as static binaries in a distroless image. The default command is the router;
# docker-compose.yml runs `migrate`, `run` and the demo from this one image.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cdc-router ./cmd/cdc-router && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/cdc-router-demo ./cmd/cdc-router-demo

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cdc-router /out/cdc-router-demo /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/cdc-router"]
CMD ["run"]
