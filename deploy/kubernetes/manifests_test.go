package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// manifests is every object of the folder, decoded strictly into its API type.
type manifests struct {
	deployments []*appsv1.Deployment
	pdbs        []*policyv1.PodDisruptionBudget
	services    []*corev1.Service
	monitors    []*monitoringv1.ServiceMonitor
	configMaps  []*corev1.ConfigMap
	secrets     []*corev1.Secret
	jobs        []*batchv1.Job
	files       []string
}

// decode decodes one YAML document strictly (unknown or duplicate fields fail) into the type its
// apiVersion and kind name.
func decode(doc []byte, m *manifests) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		m.deployments, obj = append(m.deployments, o), o
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		m.pdbs, obj = append(m.pdbs, o), o
	case "v1 Service":
		o := &corev1.Service{}
		m.services, obj = append(m.services, o), o
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o := &monitoringv1.ServiceMonitor{}
		m.monitors, obj = append(m.monitors, o), o
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		m.configMaps, obj = append(m.configMaps, o), o
	case "v1 Secret":
		o := &corev1.Secret{}
		m.secrets, obj = append(m.secrets, o), o
	case "batch/v1 Job":
		o := &batchv1.Job{}
		m.jobs, obj = append(m.jobs, o), o
	default:
		return fmt.Errorf("unexpected apiVersion %q kind %q", tm.APIVersion, tm.Kind)
	}
	return yaml.UnmarshalStrict(doc, obj)
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

func load(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{}
	for _, f := range files {
		if f == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, f)
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(text), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			if err := decode([]byte(doc), m); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
			}
		}
	}
	return m
}

func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	bad := map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicass: 2\n",
		"wrong type":    "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: two\n",
		"duplicate":     "apiVersion: v1\nkind: ConfigMap\ndata:\n  A: x\n  A: y\n",
		"unknown kind":  "apiVersion: v1\nkind: Deploymen\n",
	}
	for name, doc := range bad {
		if err := decode([]byte(doc), &manifests{}); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

var shardArg = regexp.MustCompile(`^(\d+)/(\d+)$`)

// TestManifestsAgree: the objects decode strictly and fit together: one Deployment of 2 replicas per
// shard, --shard i/N matching its name and label, probes on the health endpoints of the port the
// ConfigMap's CDC_ROUTER_HTTP_ADDR serves, a PodDisruptionBudget per shard, the Service and the
// ServiceMonitor selecting the routers, the Job migrating N shards, and the memory limit above the Go
// soft limit the router sets.
func TestManifestsAgree(t *testing.T) {
	m := load(t)
	if len(m.configMaps) != 1 || len(m.secrets) != 1 || len(m.services) != 1 || len(m.monitors) != 1 || len(m.jobs) != 1 {
		t.Fatalf("want one ConfigMap, Secret, Service, ServiceMonitor and Job; have %d, %d, %d, %d, %d",
			len(m.configMaps), len(m.secrets), len(m.services), len(m.monitors), len(m.jobs))
	}
	cm, secret, svc, mon, job := m.configMaps[0], m.secrets[0], m.services[0], m.monitors[0], m.jobs[0]
	for _, key := range []string{"CDC_ROUTER_PG_URL", "CDC_ROUTER_AMQP_URL"} {
		if secret.StringData[key] == "" {
			t.Errorf("the Secret has no %s", key)
		}
	}
	for key := range cm.Data {
		if strings.Contains(key, "URL") {
			t.Errorf("ConfigMap key %s: URLs hold passwords and belong in the Secret", key)
		}
	}
	if cm.Data["CDC_ROUTER_HTTP_ADDR"] != ":8080" {
		t.Fatalf("CDC_ROUTER_HTTP_ADDR = %q, the probes and the Service use port 8080", cm.Data["CDC_ROUTER_HTTP_ADDR"])
	}
	n := len(m.deployments)
	if n < 1 || len(m.pdbs) != n {
		t.Fatalf("%d Deployments and %d PodDisruptionBudgets: want one of each per shard", n, len(m.pdbs))
	}
	want := []string{"migrate", "--shards", fmt.Sprint(n)}
	if n == 1 {
		want = []string{"migrate"}
	}
	if !slices.Equal(job.Spec.Template.Spec.Containers[0].Args, want) {
		t.Errorf("the migrate Job's args %q, want %q", job.Spec.Template.Spec.Containers[0].Args, want)
	}
	seen := map[int]bool{}
	for _, d := range m.deployments {
		shard := checkDeployment(t, d, n, cm, secret)
		if seen[shard] {
			t.Errorf("two Deployments for shard %d", shard)
		}
		seen[shard] = true
		pods := labels.Set(d.Spec.Template.Labels)
		matched := 0
		for _, p := range m.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Matches(pods) {
				matched++
				if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() != 1 {
					t.Errorf("PodDisruptionBudget %s: minAvailable should be 1 of the 2 replicas", p.Name)
				}
			}
		}
		if matched != 1 {
			t.Errorf("Deployment %s: %d PodDisruptionBudgets select its pods, want 1", d.Name, matched)
		}
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(pods) {
			t.Errorf("the metrics Service does not select the pods of %s", d.Name)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(&mon.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor's selector does not match the Service's labels (%v)", err)
	}
	for _, ep := range mon.Spec.Endpoints {
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
			t.Errorf("the ServiceMonitor scrapes port %q, which the Service does not name", ep.Port)
		}
	}
}

// checkDeployment checks one shard's Deployment and returns its shard number.
func checkDeployment(t *testing.T, d *appsv1.Deployment, n int, cm *corev1.ConfigMap, secret *corev1.Secret) int {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("%s: want 2 replicas, an active router and a hot standby", d.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: the selector does not match the pod template's labels (%v)", d.Name, err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if n == 1 && slices.Equal(c.Args, []string{"run"}) {
		checkContainer(t, d, c, cm, secret)
		return 0 // one unsharded router
	}
	if len(c.Args) != 3 || c.Args[0] != "run" || c.Args[1] != "--shard" || !shardArg.MatchString(c.Args[2]) {
		t.Fatalf("%s: args %q, want run --shard i/N", d.Name, c.Args)
	}
	var i, count int
	fmt.Sscanf(c.Args[2], "%d/%d", &i, &count)
	if count != n || i < 0 || i >= n || d.Name != fmt.Sprintf("cdc-router-shard-%d", i) ||
		d.Spec.Template.Labels["cdc-router/shard"] != fmt.Sprint(i) {
		t.Errorf("%s: --shard %s and label %q do not fit its name and the %d shard Deployments", d.Name, c.Args[2],
			d.Spec.Template.Labels["cdc-router/shard"], n)
	}
	checkContainer(t, d, c, cm, secret)
	return i
}

// checkContainer checks the router container of a Deployment: configuration, port, probes, memory, grace.
func checkContainer(t *testing.T, d *appsv1.Deployment, c corev1.Container, cm *corev1.ConfigMap, secret *corev1.Secret) {
	t.Helper()
	var refs []string
	for _, src := range c.EnvFrom {
		switch {
		case src.ConfigMapRef != nil:
			refs = append(refs, "configmap/"+src.ConfigMapRef.Name)
		case src.SecretRef != nil:
			refs = append(refs, "secret/"+src.SecretRef.Name)
		}
	}
	sort.Strings(refs)
	if want := []string{"configmap/" + cm.Name, "secret/" + secret.Name}; !slices.Equal(refs, want) {
		t.Errorf("%s: envFrom %q, want %q", d.Name, refs, want)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("%s: want one container port http 8080, the router's --http-addr", d.Name)
	}
	probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe}
	paths := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}
	for name, p := range probes {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != paths[name] || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: the %s probe must GET %s on port http", d.Name, name, paths[name])
		}
	}
	limit := c.Resources.Limits[corev1.ResourceMemory]
	softLimit := resource.MustParse("104Mi") // default max-inflight-bytes 64 MiB + 40 MiB headroom
	if limit.Cmp(softLimit) <= 0 {
		t.Errorf("%s: memory limit %s is not above the router's Go soft memory limit %s", d.Name, limit.String(), softLimit.String())
	}
	if req := c.Resources.Requests[corev1.ResourceMemory]; req.IsZero() || req.Cmp(limit) > 0 {
		t.Errorf("%s: memory request %s must be set and at most the limit", d.Name, req.String())
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("%s: terminationGracePeriodSeconds must exceed the 30 s shutdown timeout", d.Name)
	}
}

// TestConfigMapKeysAreRouterSettings: every ConfigMap and Secret key is the environment variable of a
// flag of `cdc-router run` (a misspelt key would be ignored without a word), read from its --help.
func TestConfigMapKeysAreRouterSettings(t *testing.T) {
	m := load(t)
	cmd := exec.Command("go", "run", "./cmd/cdc-router", "run", "--help")
	cmd.Dir = "../.."
	out, _ := cmd.CombinedOutput() // --help exits non-zero
	known := map[string]bool{}
	for _, match := range regexp.MustCompile(`\(env (CDC_ROUTER_[A-Z_]+)\)`).FindAllStringSubmatch(string(out), -1) {
		known[match[1]] = true
	}
	if len(known) < 10 {
		t.Fatalf("could not read the router's settings from `cdc-router run --help`:\n%s", out)
	}
	for _, cm := range m.configMaps {
		for key := range cm.Data {
			if !known[key] {
				t.Errorf("ConfigMap key %s is no setting of cdc-router run", key)
			}
		}
	}
	for _, s := range m.secrets {
		for key := range s.StringData {
			if !known[key] {
				t.Errorf("Secret key %s is no setting of cdc-router run", key)
			}
		}
	}
}

// TestKustomizationListsEveryManifest: kubectl apply -k applies every manifest of the folder.
func TestKustomizationListsEveryManifest(t *testing.T) {
	m := load(t)
	text, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(text, &k); err != nil {
		t.Fatal(err)
	}
	listed := slices.Clone(k.Resources)
	sort.Strings(listed)
	if !slices.Equal(listed, m.files) {
		t.Errorf("kustomization.yaml lists %q, the folder has %q", listed, m.files)
	}
}
