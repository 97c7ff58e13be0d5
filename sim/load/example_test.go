package load_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/gatekeeper-dev/gatekeeper/sim/load"
)

// Three requests at 50 per second against a server that answers every one;
// the run ends when the last has arrived and been answered.
func ExampleGenerator() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	g, err := load.New(load.Settings{URL: srv.URL, Model: "m", QPS: 50, MaxRequests: 3, Seed: 1, Client: srv.Client()})
	if err != nil {
		panic(err)
	}
	if err := g.Run(context.Background()); err != nil {
		panic(err)
	}
	st := g.Stats()
	fmt.Println(st.Arrivals, st.Sent, st.Statuses[http.StatusOK], st.Finished())
	// Output: 3 3 3 3
}
