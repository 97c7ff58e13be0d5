package inferencepool

import (
	"os/exec"
	"strings"
	"testing"
)

// The package and its tests read pods through the dynamic client, so that
// building them compiles none of k8s.io/api's API groups (minutes of cold
// `go build -race` on CI) nor the typed clients and informers built on them.
func TestNoTypedAPI(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-test", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list -test -deps: %v", err)
	}
	banned := []string{"k8s.io/api/", "k8s.io/client-go/kubernetes", "k8s.io/client-go/informers",
		"k8s.io/client-go/dynamic/dynamicinformer"}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if dep == strings.TrimSuffix(b, "/") || strings.HasPrefix(dep, b) {
				t.Errorf("inferencepool (with its tests) depends on %s", dep)
			}
		}
	}
}
