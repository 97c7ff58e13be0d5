package inferencepool

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// serviceAccountNamespace is where the kubelet mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ClientsFromConfig builds the dynamic client a Watcher reads pools and
// pods through (Options.Dynamic) from the kubeconfig file at kubeconfigPath
// or, when it is "", from the pod's service account (rest.InClusterConfig).
// It does not contact the API server.
func ClientsFromConfig(kubeconfigPath string) (dynamic.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfigPath == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	}
	if err != nil {
		return nil, fmt.Errorf("inferencepool: kubernetes config: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "gatekeeper"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("inferencepool: dynamic client: %w", err)
	}
	return dyn, nil
}

// OwnNamespace returns the namespace gatekeeper runs in, the default for a
// pool reference that names none: POD_NAMESPACE when set (the downward API,
// or by hand outside a cluster), else the service account's namespace file.
func OwnNamespace() (string, error) {
	return ownNamespace(os.Getenv("POD_NAMESPACE"), serviceAccountNamespace)
}

func ownNamespace(env, path string) (string, error) {
	if ns := strings.TrimSpace(env); ns != "" {
		return ns, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("inferencepool: own namespace: POD_NAMESPACE unset and %w", err)
	}
	ns := strings.TrimSpace(string(b))
	if ns == "" {
		return "", fmt.Errorf("inferencepool: own namespace: %s: %w", path, errEmpty)
	}
	return ns, nil
}
