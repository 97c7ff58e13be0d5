package memlimit

import (
	"fmt"
	"runtime/debug"
	"testing"
	"testing/fstest"
)

func TestLimit(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name      string
		env       string // GOMEMLIMIT
		files     fstest.MapFS
		wantLimit int64
		wantOK    bool
	}{
		{name: "v2 limit", files: fstest.MapFS{"memory.max": file("4294967296\n")}, wantLimit: 4 * gib / 100 * 90, wantOK: true},
		{name: "v2 max", files: fstest.MapFS{"memory.max": file("max\n")}},
		{name: "v2 wins over v1", files: fstest.MapFS{"memory.max": file("1000\n"),
			"memory/memory.limit_in_bytes": file("2000\n")}, wantLimit: 900, wantOK: true},
		{name: "v2 max does not fall back to v1", files: fstest.MapFS{"memory.max": file("max\n"),
			"memory/memory.limit_in_bytes": file("2000\n")}},
		{name: "v1 limit", files: fstest.MapFS{"memory/memory.limit_in_bytes": file("2147483648\n")},
			wantLimit: 2 * gib / 100 * 90, wantOK: true},
		{name: "v1 unlimited", files: fstest.MapFS{"memory/memory.limit_in_bytes": file("9223372036854771712\n")}},
		{name: "no cgroup files", files: fstest.MapFS{"cpu.max": file("max 100000\n")}},
		{name: "malformed", files: fstest.MapFS{"memory.max": file("lots\n")}},
		{name: "zero", files: fstest.MapFS{"memory.max": file("0\n")}},
		{name: "GOMEMLIMIT set", env: "3GiB", files: fstest.MapFS{"memory.max": file("4294967296\n")}},
		{name: "GOMEMLIMIT off", env: "off", files: fstest.MapFS{"memory.max": file("4294967296\n")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tt.env
				}
				return ""
			}
			limit, ok := Limit(getenv, tt.files)
			if limit != tt.wantLimit || ok != tt.wantOK {
				t.Errorf("Limit() = %d, %v, want %d, %v", limit, ok, tt.wantLimit, tt.wantOK)
			}
		})
	}
}

// TestSet is not parallel: it changes the process's memory limit, and puts
// it back.
func TestSet(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	noEnv := func(string) string { return "" }
	if got := Set(noEnv, fstest.MapFS{"memory.max": {Data: []byte("max\n")}}); got != 0 || debug.SetMemoryLimit(-1) != prev {
		t.Errorf("Set(max) = %d, limit %d; want 0 and the limit unchanged (%d)", got, debug.SetMemoryLimit(-1), prev)
	}
	const want = 1 << 40 / 100 * percent
	if got := Set(noEnv, fstest.MapFS{"memory.max": {Data: []byte("1099511627776\n")}}); got != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("Set(1 TiB) = %d, limit %d; want %d", got, debug.SetMemoryLimit(-1), want)
	}
}

func ExampleLimit() {
	cgroup := fstest.MapFS{"memory.max": {Data: []byte("2147483648\n")}} // a 2 GiB container
	limit, ok := Limit(func(string) string { return "" }, cgroup)
	fmt.Println(limit, ok)
	// Output: 1932735240 true
}
