package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// procKB reads a "Vm…" field (VmRSS, VmHWM) of /proc/PID/status in KiB.
func procKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("driver: %s not in /proc/%d/status", field, pid)
}

// goMem sums named gauges (go_memstats_heap_inuse_bytes, …) scraped from a
// gatekeeper's /metrics.
func goMem(client *http.Client, metricsURL string, names ...string) (float64, error) {
	resp, err := client.Get(metricsURL)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, n := range names {
			if v, ok := strings.CutPrefix(sc.Text(), n+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, err
				}
				sum += f
			}
		}
	}
	return sum, sc.Err()
}
