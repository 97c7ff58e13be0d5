package podconn_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/podconn"
)

// A reverse proxy forwards through a Transport as it would through
// http.Transport.
func ExampleTransport() {
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello from the pod")
	}))
	defer pod.Close()
	target, _ := url.Parse(pod.URL)

	tr := &podconn.Transport{
		ResponseHeaderTimeout: time.Minute,
		IdleConnTimeout:       4 * time.Second, // below the pod's keep-alive
		MaxIdleConnsPerHost:   16,
		Fallback:              http.DefaultTransport, // https pods, upgrades
	}
	defer tr.CloseIdleConnections()
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: tr,
	})
	defer front.Close()

	res, err := http.Get(front.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, string(body))
	// Output: 200 hello from the pod
}
