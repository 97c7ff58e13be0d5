package config

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Diff returns the key paths whose values differ between old and next, in
// schema order ("server.listen", "upstreams[0].max_inflight",
// "pressure.rules.waiting"). A list whose length changed is one path
// ("upstreams"); a map entry or optional section present on one side only is
// its own path. It is meant for reload: log what changed (Changes adds the
// values), and find changes that apply only at start (the listeners, for
// example).
func Diff(old, next *Config) []string {
	cs := changes(old, next)
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.path
	}
	return out
}

// absent is a Change's value on a side where the key is not in the policy:
// an optional section not set, a map entry not there.
const absent = "(absent)"

// Redacted replaces a secret in a Change's values.
const Redacted = "REDACTED"

// Change is one key whose value differs between two policies.
type Change struct {
	// Path is the key path, as Diff names it.
	Path string
	// Old and New are the key's values in the two policies, as the policy
	// file writes them, on one line (YAML flow style: 80, 40ms,
	// {degrade: 1.2}, [a, b]), or Absent. They are safe to log: a value
	// under a key tagged log:"redact" (hooks' headers and body, tracing's
	// headers) reads Redacted, and so do the password and every query
	// value of a URL (or absolute path) anywhere in the policy.
	Old, New string
}

// Changes is Diff with each changed key's old and new values, secrets
// masked: what a reload logs.
func Changes(old, next *Config) []Change {
	cs := changes(old, next)
	out := make([]Change, len(cs))
	for i, c := range cs {
		out[i] = Change{Path: c.path, Old: logValue(c.a, c.secret), New: logValue(c.b, c.secret)}
	}
	return out
}

// changed is one differing key with its two values (invalid or a nil
// pointer: absent) and whether it lies under a log:"redact" key.
type changed struct {
	path   string
	a, b   reflect.Value
	secret bool
}

func changes(old, next *Config) []changed {
	var out []changed
	diff(reflect.ValueOf(old).Elem(), reflect.ValueOf(next).Elem(), "", false, &out)
	return out
}

func diff(a, b reflect.Value, path string, secret bool, out *[]changed) {
	add := func() { *out = append(*out, changed{path: path, a: a, b: b, secret: secret}) }
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if f.IsExported() {
				diff(a.Field(i), b.Field(i), join(path, f.Tag.Get("yaml")), secret || redacted(f), out)
			}
		}
		return
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				add()
			}
			return
		}
		diff(a.Elem(), b.Elem(), path, secret, out)
		return
	case reflect.Slice:
		if a.Len() != b.Len() {
			add()
			return
		}
		for i := range a.Len() {
			diff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), secret, out)
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
				*out = append(*out, changed{path: join(path, name), a: va, b: vb, secret: secret})
				continue
			}
			diff(va, vb, join(path, name), secret, out)
		}
		return
	}
	if !a.Equal(b) {
		add()
	}
}

// redacted reports whether the field's values are secrets: never logged.
func redacted(f reflect.StructField) bool { return f.Tag.Get("log") == "redact" }

// logValue writes v as Change does.
func logValue(v reflect.Value, secret bool) string {
	if !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
		return absent
	}
	n := encoder{redact: true}.node(v, secret)
	flow(n)
	b, err := yaml.Marshal(n)
	if err != nil {
		return fmt.Sprintf("(%v)", err) // the schema's kinds all encode; not reached
	}
	return strings.Join(strings.Fields(string(b)), " ") // one line, even if the encoder wraps
}

// flow sets n and everything under it to YAML flow style.
func flow(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flow(c)
	}
}

// redactURL masks the password and every query value of s when s is a URL
// with a scheme or an absolute path (a hook's URL may be one); anything
// else is returned as is.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" && !strings.HasPrefix(s, "/") {
		return s
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Redacted)
	}
	if u.RawQuery != "" {
		var parts []string
		for _, kv := range strings.Split(u.RawQuery, "&") {
			k, _, _ := strings.Cut(kv, "=")
			parts = append(parts, k+"="+Redacted)
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	return u.String()
}

// RestartOnly keeps, of the changed paths Diff returned, those a reload
// cannot apply: the listeners and their http.Server limits, the upstream
// transport, the health check, the cluster (Redis) and scaling sections, the prefix index's capacity. (server.max_body_bytes,
// request_id_header, drain_delay and shutdown_timeout are read per request
// or at shutdown, so they apply.)
func RestartOnly(changed []string) []string {
	var out []string
	for _, k := range changed {
		switch {
		case k == "server.listen", k == "server.admin_listen", k == "server.read_header_timeout",
			k == "server.idle_timeout", k == "server.max_header_bytes", k == "server.max_concurrent_streams",
			k == "server.max_connections", strings.HasPrefix(k, "server.overload"),
			k == "server.stream_handoff", k == "server.h2c", // the HTTP front's handler and server are built once
			strings.HasPrefix(k, "server.tls"),
			strings.HasPrefix(k, "transport."), strings.HasPrefix(k, "health_check."),
			k == "cluster", strings.HasPrefix(k, "cluster."),
			k == "endpoint_picker", strings.HasPrefix(k, "endpoint_picker."),
			k == "tracing", strings.HasPrefix(k, "tracing."),
			k == "scaling", strings.HasPrefix(k, "scaling."),
			k == "routing.prefix_capacity_blocks":
			out = append(out, k)
		}
	}
	return out
}
