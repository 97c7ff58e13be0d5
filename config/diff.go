package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Diff returns the key paths whose values differ between old and next, in
// schema order ("server.listen", "upstreams[0].max_inflight",
// "pressure.rules.waiting"). A list whose length changed is one path
// ("upstreams"); a map entry or optional section present on one side only is
// its own path. It is meant for reload: log what changed, and find changes
// that apply only at start (the listeners, for example).
func Diff(old, next *Config) []string {
	var out []string
	diff(reflect.ValueOf(old).Elem(), reflect.ValueOf(next).Elem(), "", &out)
	return out
}

func diff(a, b reflect.Value, path string, out *[]string) {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if f.IsExported() {
				diff(a.Field(i), b.Field(i), join(path, f.Tag.Get("yaml")), out)
			}
		}
		return
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				*out = append(*out, path)
			}
			return
		}
		diff(a.Elem(), b.Elem(), path, out)
		return
	case reflect.Slice:
		if a.Len() != b.Len() {
			*out = append(*out, path)
			return
		}
		for i := range a.Len() {
			diff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
		return
	case reflect.Map:
		keys := map[string]reflect.Value{}
		for _, m := range []reflect.Value{a, b} {
			for _, k := range m.MapKeys() {
				keys[k.String()] = k
			}
		}
		names := make([]string, 0, len(keys))
		for name := range keys {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			va, vb := a.MapIndex(keys[name]), b.MapIndex(keys[name])
			if !va.IsValid() || !vb.IsValid() {
				*out = append(*out, join(path, name))
				continue
			}
			diff(va, vb, join(path, name), out)
		}
		return
	}
	if !a.Equal(b) {
		*out = append(*out, path)
	}
}

// RestartOnly keeps, of the changed paths Diff returned, those a reload
// cannot apply: the listeners and their http.Server limits, the upstream
// transport, the health check and the cluster (Redis) section. (server.max_body_bytes,
// request_id_header, drain_delay and shutdown_timeout are read per request
// or at shutdown, so they apply.)
func RestartOnly(changed []string) []string {
	var out []string
	for _, k := range changed {
		switch {
		case k == "server.listen", k == "server.admin_listen", k == "server.read_header_timeout",
			k == "server.idle_timeout", k == "server.max_header_bytes", k == "server.max_concurrent_streams",
			k == "server.max_connections",
			strings.HasPrefix(k, "server.tls"),
			strings.HasPrefix(k, "transport."), strings.HasPrefix(k, "health_check."),
			k == "cluster", strings.HasPrefix(k, "cluster."),
			k == "endpoint_picker", strings.HasPrefix(k, "endpoint_picker."),
			k == "tracing", strings.HasPrefix(k, "tracing."):
			out = append(out, k)
		}
	}
	return out
}
