package deploy

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// schemaLocation is kubeconform's -schema-location for the vendored schemas.
func schemaLocation(t *testing.T) string {
	t.Helper()
	schemas, err := filepath.Abs("schemas")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(schemas, "{{ .ResourceKind }}{{ .KindSuffix }}.json")
}

// TestKubeconform validates the manifests with kubeconform against the
// vendored strict schemas (no network), and checks that those schemas do
// reject what they should: a schema that accepts anything would pass too.
func TestKubeconform(t *testing.T) {
	t.Parallel()
	bin := lookTool(t, "kubeconform", "scripts/install/kubeconform.sh")
	location := schemaLocation(t)
	tests := []struct {
		name    string
		files   []string
		wantErr string // "" means valid
	}{
		{"manifests", manifests(t), ""},
		{"unknown key", []string{"testdata/unknown-key.bad.yaml"}, "additional properties 'readOnlyRootFS' not allowed"},
		{"wrong type", []string{"testdata/wrong-type.bad.yaml"}, "got number, want string"},
		{"missing required field", []string{"testdata/missing-required.bad.yaml"}, "missing property 'port'"},
		{"ServiceMonitor unknown key", []string{"testdata/servicemonitor.bad.yaml"}, "additional properties 'intervalSeconds' not allowed"},
		{"NetworkPolicy unknown key", []string{"testdata/networkpolicy.bad.yaml"}, "additional properties 'policyType' not allowed"},
		{"PrometheusRule bad duration", []string{"testdata/prometheusrule.bad.yaml"}, "'5 minutes' does not match pattern"},
		{"kind without a schema", []string{"testdata/unknown-kind.bad.yaml"}, "could not find schema for Secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-strict", "-summary", "-schema-location", location}, tt.files...)
			out, err := runTool(t, 30*time.Second, nil, bin, args...)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("kubeconform %v: %v\n%s", tt.files, err, out)
			case tt.wantErr != "" && err == nil:
				t.Errorf("kubeconform %v accepted it, want an error with %q\n%s", tt.files, tt.wantErr, out)
			case tt.wantErr != "" && !strings.Contains(out, tt.wantErr):
				t.Errorf("kubeconform %v = %s, want an error with %q", tt.files, out, tt.wantErr)
			}
		})
	}
}

// TestKustomizeBuild builds deploy/kubernetes as `kubectl apply -k` would
// and validates what it would apply: every manifest, labelled.
func TestKustomizeBuild(t *testing.T) {
	t.Parallel()
	kustomize := lookTool(t, "kustomize", "scripts/install/kustomize.sh")
	kubeconform := lookTool(t, "kubeconform", "scripts/install/kubeconform.sh")
	built, err := runTool(t, 30*time.Second, nil, kustomize, "build", "kubernetes")
	if err != nil {
		t.Fatalf("kustomize build kubernetes: %v\n%s", err, built)
	}
	out, err := runTool(t, 30*time.Second, []byte(built), kubeconform, "-strict", "-summary", "-schema-location", schemaLocation(t), "-")
	if err != nil {
		t.Errorf("kubeconform on kustomize's output: %v\n%s", err, out)
	}
	dec := yaml.NewDecoder(strings.NewReader(built))
	var kinds []string
	for {
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata meta   `yaml:"metadata"`
		}
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kustomize output: %v", err)
		}
		kinds = append(kinds, obj.Kind)
		if obj.Metadata.Labels["app.kubernetes.io/part-of"] != "gatekeeper" {
			t.Errorf("%s %s: labels %v, want app.kubernetes.io/part-of=gatekeeper", obj.Kind, obj.Metadata.Name, obj.Metadata.Labels)
		}
	}
	if len(kinds) != len(manifests(t)) {
		t.Errorf("kustomize build = %v, want one object per manifest (%d)", kinds, len(manifests(t)))
	}
}
