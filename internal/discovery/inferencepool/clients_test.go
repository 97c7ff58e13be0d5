package inferencepool

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
)

func TestOwnNamespace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "namespace")
	if err := os.WriteFile(file, []byte("gatekeeper\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env, path string
		want            string
		wantErr         error
	}{
		{name: "env wins", env: "from-env", path: file, want: "from-env"},
		{name: "file, trimmed", path: file, want: "gatekeeper"},
		{name: "blank env reads the file", env: " ", path: file, want: "gatekeeper"},
		{name: "no file", path: filepath.Join(dir, "missing"), wantErr: fs.ErrNotExist},
		{name: "empty file", path: empty, wantErr: errEmpty},
	}
	for _, tt := range tests {
		got, err := ownNamespace(tt.env, tt.path)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: ownNamespace(%q, %q) = %q, %v; want %q, %v", tt.name, tt.env, tt.path, got, err, tt.want, tt.wantErr)
		}
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: dev
  cluster:
    server: https://127.0.0.1:6443
contexts:
- name: dev
  context:
    cluster: dev
    user: dev
current-context: dev
users:
- name: dev
  user:
    token: not-a-real-token
`

// Not parallel: it sets the environment rest.InClusterConfig reads.
func TestClientsFromConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	dyn, err := ClientsFromConfig(path)
	if err != nil || dyn == nil {
		t.Fatalf("ClientsFromConfig(kubeconfig) = %v, %v; want a client", dyn, err)
	}
	if _, err := ClientsFromConfig(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("ClientsFromConfig(missing file) = nil error")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := ClientsFromConfig(""); !errors.Is(err, rest.ErrNotInCluster) {
		t.Fatalf("ClientsFromConfig(\"\") outside a cluster = %v, want ErrNotInCluster", err)
	}
}
