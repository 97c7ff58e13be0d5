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

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux the bench runs on (Go has no sysconf without cgo).
const clockTicks = 100

// cpuSeconds is the user plus system CPU time a process has used, from
// fields 14 and 15 of /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	// fields[0] is the state, field 3 of stat; utime and stime are 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("driver: short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseInt(fields[11], 10, 64)
	s, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("driver: bad utime/stime in /proc/%d/stat", pid)
	}
	return float64(u+s) / clockTicks, nil
}

// statFields returns /proc/PID/stat from the state field on (the command
// name before it, in parentheses, may hold spaces).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, fmt.Errorf("driver: malformed /proc/%d/stat", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// servers returns the processes that do a proxy's work: the children of pid
// when it has any (nginx's workers under their master), else pid itself.
func servers(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := statFields(c); err == nil && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, c)
		}
	}
	if len(kids) == 0 {
		return []int{pid}
	}
	return kids
}

// sumCPU and sumRSS add cpuSeconds and VmRSS (KiB) over pids.
func sumCPU(pids []int) (float64, error) {
	var sum float64
	for _, p := range pids {
		v, err := cpuSeconds(p)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func sumRSS(pids []int) (int64, error) {
	var sum int64
	for _, p := range pids {
		v, err := procKB(p, "VmRSS")
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// fdLimit is the soft "Max open files" of /proc/PID/limits, -1 if unknown
// or unlimited.
func fdLimit(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return -1
}
