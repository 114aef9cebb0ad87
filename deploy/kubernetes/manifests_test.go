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

// configDir is where the pods mount the ConfigMap of configuration files.
const configDir = "/etc/cdc-router/"

// TestManifestsAgree: the objects decode strictly and fit together: one Deployment of 2 replicas per
// shard of the native table, --shard i/N matching its name and label, and one per mapped table (a mapping
// takes no --shard); each router reads its configuration file from the mounted ConfigMap and its URLs from
// the routers' Secret, with probes on the health endpoints of the port its file's http-addr serves; a
// PodDisruptionBudget per Deployment, the Service and the ServiceMonitor selecting the routers; the Job
// migrating N shards and every mapped table as the owner (a Secret of its own), then running the grants;
// PostgreSQL URLs with sslmode=verify-full; the memory limit above the Go soft limit the router sets.
func TestManifestsAgree(t *testing.T) {
	m := load(t)
	if len(m.configMaps) != 1 || len(m.secrets) != 2 || len(m.services) != 1 || len(m.monitors) != 1 || len(m.jobs) != 1 {
		t.Fatalf("want one ConfigMap, two Secrets, one Service, ServiceMonitor and Job; have %d, %d, %d, %d, %d",
			len(m.configMaps), len(m.secrets), len(m.services), len(m.monitors), len(m.jobs))
	}
	cm, svc, mon, job := m.configMaps[0], m.services[0], m.monitors[0], m.jobs[0]
	secrets := map[string]*corev1.Secret{}
	for _, s := range m.secrets {
		secrets[s.Name] = s
		for _, key := range []string{"CDC_ROUTER_PG_URL", "CDC_ROUTER_AMQP_URL"} {
			if s.StringData[key] == "" {
				t.Errorf("the Secret %s has no %s", s.Name, key)
			}
		}
		if pg := s.StringData["CDC_ROUTER_PG_URL"]; !strings.Contains(pg, "sslmode=verify-full") ||
			!strings.Contains(pg, "sslrootcert="+configDir) {
			t.Errorf("the Secret %s: CDC_ROUTER_PG_URL %q must verify the server (sslmode=verify-full, sslrootcert in %s)", s.Name, pg, configDir)
		} else if ca := pg[strings.Index(pg, "sslrootcert="+configDir)+len("sslrootcert="+configDir):]; cm.Data[strings.Split(ca, "&")[0]] == "" {
			t.Errorf("the Secret %s: the CA %s is not in the ConfigMap", s.Name, ca)
		}
	}
	router, owner := secrets["cdc-router"], secrets["cdc-router-migrate"]
	if router == nil || owner == nil {
		t.Fatalf("want the Secrets cdc-router (the routers' role) and cdc-router-migrate (the owner)")
	}
	if strings.Contains(owner.StringData["CDC_ROUTER_PG_URL"], "//cdc_router:") || !strings.Contains(router.StringData["CDC_ROUTER_PG_URL"], "//cdc_router:") {
		t.Errorf("the routers run as the role cdc_router, the migrate Job as the tables' owner")
	}
	for key := range cm.Data {
		if strings.Contains(strings.ToLower(cm.Data[key]), "url") {
			t.Errorf("ConfigMap key %s: URLs hold passwords and belong in the Secret", key)
		}
	}
	var sharded, mapped []*appsv1.Deployment
	for _, d := range m.deployments {
		if slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--shard") {
			sharded = append(sharded, d)
		} else {
			mapped = append(mapped, d)
		}
	}
	n := len(sharded)
	if n < 1 || len(mapped) < 1 || len(m.pdbs) != len(m.deployments) {
		t.Fatalf("%d shard Deployments, %d of mapped tables and %d PodDisruptionBudgets: want shards, a mapped table and a budget each",
			n, len(mapped), len(m.pdbs))
	}
	checkJob(t, job, cm, owner, n, mapped)
	seen := map[int]bool{}
	for _, d := range m.deployments {
		shard := checkDeployment(t, d, n, cm, router)
		if shard >= 0 && seen[shard] {
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

// checkJob checks the migrate Job: as the owner, migrate with --shards n the native table's file, then each
// mapped Deployment's file, then the grants, in that order.
func checkJob(t *testing.T, job *batchv1.Job, cm *corev1.ConfigMap, owner *corev1.Secret, n int, mapped []*appsv1.Deployment) {
	t.Helper()
	spec := job.Spec.Template.Spec
	var migrated []string
	for i, c := range spec.InitContainers {
		file := configFile(t, job.Name, spec, c, cm, owner)
		want := []string{"migrate"}
		if i == 0 {
			want = []string{"migrate", "--shards", fmt.Sprint(n)}
		}
		if !slices.Equal(c.Args, want) {
			t.Errorf("the migrate Job's step %s: args %q, want %q", c.Name, c.Args, want)
		}
		migrated = append(migrated, file)
	}
	for _, d := range mapped {
		c := d.Spec.Template.Spec.Containers[0]
		if file := envValue(c, "CDC_ROUTER_CONFIG_FILE"); !slices.Contains(migrated, file) {
			t.Errorf("the migrate Job does not migrate %s, the file of %s", file, d.Name)
		}
	}
	if len(spec.Containers) != 1 || !slices.Contains(spec.Containers[0].Args, configDir+"grants.sql") || cm.Data["grants.sql"] == "" {
		t.Errorf("the migrate Job must end with the grants of the ConfigMap's grants.sql")
	} else {
		configFile(t, job.Name, spec, spec.Containers[0], cm, owner)
	}
}

// envValue is the value of the container's environment variable name.
func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// configFile checks that c reads the ConfigMap mounted at configDir and the Secret secret, and returns the
// configuration file it names (CDC_ROUTER_CONFIG_FILE), which must be a key of the ConfigMap when set.
func configFile(t *testing.T, who string, spec corev1.PodSpec, c corev1.Container, cm *corev1.ConfigMap, secret *corev1.Secret) string {
	t.Helper()
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != secret.Name {
		t.Errorf("%s/%s: envFrom must be the Secret %s alone", who, c.Name, secret.Name)
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && vm.MountPath+"/" == configDir && vm.ReadOnly {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("%s/%s: the ConfigMap %s is not mounted read-only at %s", who, c.Name, cm.Name, configDir)
	}
	file := envValue(c, "CDC_ROUTER_CONFIG_FILE")
	if file != "" && cm.Data[strings.TrimPrefix(file, configDir)] == "" {
		t.Errorf("%s/%s: CDC_ROUTER_CONFIG_FILE %s is no key of the ConfigMap", who, c.Name, file)
	}
	return file
}

// checkDeployment checks one router Deployment and returns its shard number, -1 for a mapped table's.
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
	file := configFile(t, d.Name, d.Spec.Template.Spec, c, cm, secret)
	if file == "" {
		t.Errorf("%s: no CDC_ROUTER_CONFIG_FILE", d.Name)
	}
	if !strings.Contains(cm.Data[strings.TrimPrefix(file, configDir)], `http-addr: ":8080"`) {
		t.Errorf("%s: its file %s must serve http-addr \":8080\", the port of the probes and the Service", d.Name, file)
	}
	checkContainer(t, d, c)
	if slices.Equal(c.Args, []string{"run"}) {
		return -1 // a mapped table's router, or one unsharded router
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
	return i
}

// checkContainer checks the router container of a Deployment: port, probes, memory, grace.
func checkContainer(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
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

// TestConfigurationIsTheRoutersOwn: the router reads every configuration file of the ConfigMap as run does
// (`run --config-file F --print-config`: an unknown key, a wrong kind or a missing mapping file is
// refused), and every Secret key is the environment variable of a flag of `cdc-router run`, read from its
// --help (a misspelt key would be ignored without a word).
func TestConfigurationIsTheRoutersOwn(t *testing.T) {
	m := load(t)
	bin := filepath.Join(t.TempDir(), "cdc-router")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cdc-router")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	for _, cm := range m.configMaps {
		for key, text := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, key), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for key := range cm.Data {
			if !strings.HasSuffix(key, ".yaml") {
				continue
			}
			cmd := exec.Command(bin, "run", "--config-file", filepath.Join(dir, key), "--print-config")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("ConfigMap key %s is not a configuration file run reads: %v\n%s", key, err, out)
			}
		}
	}
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput() // --help exits non-zero
	known := map[string]bool{}
	for _, match := range regexp.MustCompile(`\(env (CDC_ROUTER_[A-Z_]+)\)`).FindAllStringSubmatch(string(out), -1) {
		known[match[1]] = true
	}
	if len(known) < 10 {
		t.Fatalf("could not read the router's settings from `cdc-router run --help`:\n%s", out)
	}
	for _, s := range m.secrets {
		for key := range s.StringData {
			if !known[key] {
				t.Errorf("Secret %s key %s is no setting of cdc-router run", s.Name, key)
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
