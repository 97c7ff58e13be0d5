package config_test

import (
	"fmt"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

func ExampleLoad() {
	c, err := config.Load(strings.NewReader(`
upstreams:
  - url: http://10.0.0.5:8000
    max_inflight: 128
pressure:
  rules:
    kv_cache_usage: {}        # no rule for KV-cache usage
    waiting: {degrade: 64}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	u := c.Upstreams[0]
	fmt.Println(u.Name, u.MinInflight, u.MaxInflight, c.Pressure.Interval)
	for _, s := range config.Signals() {
		if r, ok := c.Pressure.Rules[s]; ok {
			fmt.Println(s, *r.Degrade, r.Shed != nil)
		}
	}

	_, err = config.Load(strings.NewReader(`
upstreams: [{url: "http://10.0.0.5:8000"}]
server:
  lisen: ":8080"
batch:
  cut: 1.2
`))
	fmt.Println(err)
	// Output:
	// 10.0.0.5:8000 4 128 500ms
	// fragmentation 1.2 true
	// waiting 64 false
	// alloc_retry_rate 0.01 false
	// config: line 4: unknown key "lisen" in server (did you mean "listen"?)
	// config: line 6: batch.cut: must be above 0 and below 1, got 1.2
}

func ExampleDiff() {
	old := config.Default()
	edited := strings.Replace(string(config.DefaultYAML()), "retry_after: 2s", "retry_after: 5s", 1)
	next, err := config.Parse([]byte(edited))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(config.Diff(old, next))
	// Output:
	// [shed.retry_after]
}
