module github.com/cdc-router/cdc-router/deploy/compose

go 1.26.0

require (
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2
	sigs.k8s.io/yaml v1.6.0
)

require (
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/text v0.14.0 // indirect
)
