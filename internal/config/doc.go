// Package config is gatekeeper's policy file: its schema, strict decoding,
// defaults, validation and reload watching.
//
// Parse, Load and LoadFile decode one YAML document over the defaults (see
// Default and default.yaml, the annotated default, identical to the
// repository's config.yaml), fill derived values and validate. Decoding is
// strict: an unknown or duplicate key, a value of the wrong type or a bad
// duration is an error naming the key and its line. Every problem is
// reported at once, each a *FieldError with its key path ("upstreams[1].url")
// and line.
//
// Choices the schema makes:
//   - A key written without a value (null) keeps its default.
//   - An upstream without a name is named after its url's host:port; a
//     source without a name is "nvml" or "kind:url". Names must be unique.
//   - An nvml source must not have a url; every other kind must.
//   - pressure.rules merges over the default rules per signal: a signal
//     written in the file replaces that signal's default rule entirely, and
//     a signal written as {} or null has no rule at all.
//   - A min_inflight left out is 4, or max_inflight when that is smaller.
//   - A burst of 0 (or left out, for per_client) is the qps rounded up.
//
// Watch (or a Watcher) reports changes of the file's content, including the
// symlink swap by which Kubernetes updates a mounted ConfigMap.
//
// This package imports no other gatekeeper package.
package config
