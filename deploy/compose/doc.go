// Package compose holds no code: its test validates the repository's docker-compose.yml against the Compose
// Specification's JSON schema (testdata/compose-spec.json, vendored from the Go module
// github.com/compose-spec/compose-go/v2 v2.17.0, file schema/compose-spec.json, Apache License 2.0: the
// schema `docker compose` itself validates with) and checks what the README promises of it: pinned image
// versions and ports on 127.0.0.1 only. It is a module of its own, like deploy/kubernetes, so that the
// router's go.mod carries no schema validator; `make test` runs it.
package compose
