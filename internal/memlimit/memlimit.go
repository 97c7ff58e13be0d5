// Package memlimit gives the Go runtime a soft memory limit (GOMEMLIMIT)
// from the container's cgroup memory limit, when the environment sets none:
// the garbage collector then works harder as the heap nears the limit
// instead of letting the container be OOM-killed (issue 16).
//
// It reads the limit where a container sees its own cgroup, at the root of
// the cgroup mount (/sys/fs/cgroup with a cgroup namespace, the default for
// Kubernetes on cgroup v2 and for Docker): memory.max (cgroup v2), else
// memory/memory.limit_in_bytes (cgroup v1).
package memlimit

import (
	"bytes"
	"io/fs"
	"runtime/debug"
	"strconv"
)

// percent is the share of the cgroup limit given to the Go runtime. The
// rest is headroom for what the runtime does not count: memory of C code
// (NVML), the executable and the page cache charged to the cgroup.
const percent = 90

// unlimited is where a cgroup v1 limit means "no limit": v1 reports its
// largest page count in bytes (9223372036854771712 with 4 KiB pages).
const unlimited = 1 << 62

// Limit returns the soft memory limit to set, Percent of the cgroup memory
// limit read from cgroup (a file system rooted at the cgroup mount, as
// os.DirFS("/sys/fs/cgroup")). ok is false, and nothing should be set, when
// getenv("GOMEMLIMIT") is not empty (the runtime applied it already), when
// no limit file can be read or parsed, or when the limit is "max" or
// unlimited.
func Limit(getenv func(string) string, cgroup fs.FS) (limit int64, ok bool) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	for _, name := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		b, err := fs.ReadFile(cgroup, name)
		if err != nil {
			continue // not this cgroup version
		}
		v := string(bytes.TrimSpace(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			return 0, false
		}
		return n / 100 * percent, true
	}
	return 0, false
}

// Set calls debug.SetMemoryLimit with the limit Limit returns, when it
// returns one, and returns it (0 when it set nothing). Call it once, at the
// start of main.
func Set(getenv func(string) string, cgroup fs.FS) int64 {
	limit, ok := Limit(getenv, cgroup)
	if !ok {
		return 0
	}
	debug.SetMemoryLimit(limit)
	return limit
}
