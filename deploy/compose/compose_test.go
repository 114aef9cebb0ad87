package compose

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// composeFile is the repository's docker-compose.yml.
var composeFile = filepath.Join("..", "..", "docker-compose.yml")

// load decodes a compose file (YAML anchors and merge keys resolved) into JSON values.
func load(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s is not YAML: %v", path, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(j, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// compile compiles the vendored Compose Specification schema (JSON Schema draft 2020-12), with the
// "duration" format compose-go registers.
func compile(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "compose-spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.RegisterFormat(&jsonschema.Format{Name: "duration", Validate: func(v any) error {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		_, err := time.ParseDuration(s)
		return err
	}})
	if err := c.AddResource("compose-spec.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("compose-spec.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestComposeFileMatchesTheSpecification: docker-compose.yml is valid under the Compose Specification's
// schema, and the schema check itself catches a misspelt key and a wrong type.
func TestComposeFileMatchesTheSpecification(t *testing.T) {
	s := compile(t)
	doc := load(t, composeFile)
	if err := s.Validate(doc); err != nil {
		t.Errorf("docker-compose.yml does not match the Compose Specification:\n%v", err)
	}
	services, _ := doc["services"].(map[string]any)
	if router, _ := services["router"].(map[string]any); router["build"] == nil {
		t.Errorf("the router service has no build after the YAML merge key: %v", router)
	}
	for _, bad := range []struct {
		name string
		edit func(map[string]any)
	}{
		{"a misspelt key", func(svc map[string]any) { svc["depend_on"] = []any{"postgres"} }},
		{"a wrong type", func(svc map[string]any) { svc["stop_grace_period"] = map[string]any{"s": 40} }},
	} {
		doc := load(t, composeFile)
		bad.edit(doc["services"].(map[string]any)["router"].(map[string]any))
		if err := s.Validate(doc); err == nil {
			t.Errorf("the schema check accepts %s", bad.name)
		}
	}
	if len(services) < 5 {
		t.Errorf("docker-compose.yml has %d services, want postgres, rabbitmq, migrate, grants, router, demo", len(services))
	}
}

// pinned is an image reference with a full version tag (postgres:17.10, rabbitmq:4.0.5-management), not a
// floating one (postgres:17, rabbitmq:4-management, latest).
var pinned = regexp.MustCompile(`^[a-z0-9./-]+:\d+\.\d+(\.\d+)?(-[a-z0-9.-]+)?$`)

// TestComposeImagesArePinnedAndPortsLocal: every image Compose pulls has a full version tag, the versions
// are those the README names, and every published port is bound to 127.0.0.1.
func TestComposeImagesArePinnedAndPortsLocal(t *testing.T) {
	doc := load(t, composeFile)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range doc["services"].(map[string]any) {
		svc := v.(map[string]any)
		image, _ := svc["image"].(string)
		if _, built := svc["build"]; !built && !pinned.MatchString(image) {
			t.Errorf("service %s: image %q has no pinned version", name, image)
		}
		if m := regexp.MustCompile(`^(postgres|rabbitmq):(\d+\.\d+(\.\d+)?)`).FindStringSubmatch(image); m != nil {
			want := map[string]string{"postgres": "PostgreSQL ", "rabbitmq": "RabbitMQ "}[m[1]] + m[2]
			if !strings.Contains(string(readme), want) {
				t.Errorf("service %s runs %s, but the README does not name %q", name, image, want)
			}
		}
		ports, _ := svc["ports"].([]any)
		for _, p := range ports {
			if s, _ := p.(string); !strings.HasPrefix(s, "127.0.0.1:") {
				t.Errorf("service %s publishes %v beyond 127.0.0.1", name, p)
			}
		}
	}
}
