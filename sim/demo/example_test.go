package demo_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/sim/demo"
)

// The demo's pod answers like vLLM serving demo.Model; its policy caps the
// window at the pod's max_num_seqs.
func ExampleNewPod() {
	pod, err := demo.NewPod(demo.Default, 0, nil) // real time, no logs
	if err != nil {
		panic(err)
	}
	rec := httptest.NewRecorder()
	pod.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), `"id":"`+demo.Model+`"`))
	policy := string(demo.Policy("http://127.0.0.1:8000", "127.0.0.1:8080", "127.0.0.1:9090", 0))
	fmt.Println(strings.Contains(policy, "max_inflight: 64 "))
	// Output:
	// 200 true
	// true
}
