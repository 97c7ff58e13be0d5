package deploy

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubeconform validates the manifests with kubeconform against the
// vendored strict schemas (no network), and checks that those schemas do
// reject what they should: a schema that accepts anything would pass too.
func TestKubeconform(t *testing.T) {
	t.Parallel()
	bin := lookTool(t, "kubeconform", "scripts/install/kubeconform.sh")
	schemas, err := filepath.Abs("schemas")
	if err != nil {
		t.Fatal(err)
	}
	location := filepath.Join(schemas, "{{ .ResourceKind }}{{ .KindSuffix }}.json")
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
