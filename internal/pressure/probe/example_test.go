package probe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure/probe"
)

func ExampleRead() {
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "vllm:kv_cache_usage_perc{engine=\"0\"} 0.42\nvllm:num_requests_waiting{engine=\"0\"} 3\n")
	}))
	defer pod.Close()
	r, err := probe.Read(context.Background(), probe.Settings{URL: pod.URL + "/metrics", Kind: "vllm"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, row := range r.Rows { // r.WriteTable prints them as `gatekeeper probe` does
		fmt.Println(row.Signal, row.Value)
	}
	// Output:
	// kv_cache_usage 0.42
	// waiting 3
}
