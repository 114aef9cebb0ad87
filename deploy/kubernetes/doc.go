// Package kubernetes holds no code: its test validates the manifests of this folder (one router Deployment
// of two replicas per shard, their PodDisruptionBudgets, the ConfigMap, Secret, migrate Job, metrics
// Service and ServiceMonitor) against the Kubernetes API types with strict field checking, and checks that
// they agree with each other and with the router's flags. It is a module of its own so that the router's
// go.mod carries no Kubernetes dependency; `make test` runs it.
package kubernetes
