package quota

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Limit is a quota in tokens per window. A field of 0 means no limit in
// that window; a negative one is invalid.
type Limit struct {
	// PerMinute is the most tokens counted in any sliding minute.
	PerMinute int64 `json:"per_minute"`
	// PerDay is the most tokens counted in any sliding 24 hours.
	PerDay int64 `json:"per_day"`
}

// limited reports whether l limits some window.
func (l Limit) limited() bool { return l.PerMinute > 0 || l.PerDay > 0 }

// of returns the limit of window w (0: minute, 1: day).
func (l Limit) of(w int) int64 {
	if w == 0 {
		return l.PerMinute
	}
	return l.PerDay
}

// Limits are the quotas of a policy. The zero value limits nothing. Each
// applicable key is charged on its own: a request of client c in class k
// for model m is charged against c's quota, k's and m's, and must fit in
// all of them.
type Limits struct {
	// PerClient is the quota of every client key (the value of the
	// per-client header), each key its own.
	PerClient Limit `json:"per_client"`
	// Clients overrides PerClient for some client keys, keyed by
	// ClientName(key) ("sha256:" and 64 hex digits, either case), so the
	// policy file holds no secret. An override replaces both fields: a
	// zero field means no limit for that key in that window.
	Clients map[string]Limit `json:"clients"`
	// Classes are the quotas of traffic classes, by class name.
	Classes map[string]Limit `json:"classes"`
	// Models are the quotas of models, by model name.
	Models map[string]Limit `json:"models"`
}

// ClientName returns the name a client key has in Limits.Clients:
// "sha256:" and the 64 lower-case hex digits of the key's SHA-256.
func ClientName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return clientPrefix + hex.EncodeToString(sum[:])
}

const clientPrefix = "sha256:"

// shortName is how a client appears in errors and snapshots: "sha256:" and
// the first 12 hex digits of its hash.
func shortName(h [32]byte) string { return clientPrefix + hex.EncodeToString(h[:6]) }

// parseClientName parses "sha256:<64 hex>" (either case).
func parseClientName(name string) ([32]byte, bool) {
	var h [32]byte
	digits, ok := strings.CutPrefix(name, clientPrefix)
	if !ok || len(digits) != 2*len(h) {
		return h, false
	}
	if _, err := hex.Decode(h[:], []byte(digits)); err != nil {
		return h, false
	}
	return h, true
}

// Validate returns every problem of l at once, each naming its field, or
// nil.
func (l Limits) Validate() error {
	var errs []error
	check := func(field string, lim Limit) {
		if lim.PerMinute < 0 {
			errs = append(errs, fmt.Errorf("quota: Limits.%s.PerMinute = %d, want ≥ 0", field, lim.PerMinute))
		}
		if lim.PerDay < 0 {
			errs = append(errs, fmt.Errorf("quota: Limits.%s.PerDay = %d, want ≥ 0", field, lim.PerDay))
		}
	}
	check("PerClient", l.PerClient)
	for _, name := range sortedKeys(l.Clients) {
		field := fmt.Sprintf("Clients[%q]", name)
		if _, ok := parseClientName(name); !ok {
			errs = append(errs, fmt.Errorf("quota: Limits.%s: want \"sha256:\" and 64 hex digits", field))
		}
		check(field, l.Clients[name])
	}
	for _, kind := range []struct {
		field string
		m     map[string]Limit
	}{{"Classes", l.Classes}, {"Models", l.Models}} {
		for _, name := range sortedKeys(kind.m) {
			field := fmt.Sprintf("%s[%q]", kind.field, name)
			if name == "" {
				errs = append(errs, fmt.Errorf("quota: Limits.%s: the name is empty", field))
			}
			check(field, kind.m[name])
		}
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]Limit) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// compiled is a validated Limits as the lookups want it: the client
// overrides by hash, and only the entries that limit something.
type compiled struct {
	perClient Limit
	clients   map[[32]byte]Limit
	classes   map[string]Limit
	models    map[string]Limit
}

func compile(l Limits) *compiled {
	c := &compiled{
		perClient: l.PerClient,
		clients:   make(map[[32]byte]Limit, len(l.Clients)),
		classes:   make(map[string]Limit, len(l.Classes)),
		models:    make(map[string]Limit, len(l.Models)),
	}
	for name, lim := range l.Clients {
		h, _ := parseClientName(name) // validated
		c.clients[h] = lim            // kept even when zero: it lifts PerClient
	}
	for name, lim := range l.Classes {
		if lim.limited() {
			c.classes[name] = lim
		}
	}
	for name, lim := range l.Models {
		if lim.limited() {
			c.models[name] = lim
		}
	}
	return c
}

// client returns the quota of the client key hashed to h.
func (c *compiled) client(h [32]byte) Limit {
	if l, ok := c.clients[h]; ok {
		return l
	}
	return c.perClient
}
