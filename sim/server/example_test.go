package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/server"
)

// A simulated pod: an engine, a server around it. Run (or Serve) drives the
// engine in real time; endpoints that only read state answer at once.
func ExampleServer() {
	e, err := sim.New(sim.Settings{}) // Llama-3-8B on an A100-80G
	if err != nil {
		panic(err)
	}
	srv, err := server.New(e, server.Settings{Speed: 10})
	if err != nil {
		panic(err)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	fmt.Println(rec.Code)
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	fmt.Println(strings.Contains(rec.Body.String(), `"id":"meta-llama/Meta-Llama-3-8B"`))
	// Output:
	// 200
	// true
}
