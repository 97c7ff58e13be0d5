package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sort"
)

// modelSet is what a pod serves: the model ids, and the entries its own
// GET /v1/models listed (nil when the ids come from the policy). Immutable.
// unknown marks a pod that discovers its models and has not answered yet:
// it serves no model until it does.
type modelSet struct {
	ids     map[string]bool
	entries []json.RawMessage
	unknown bool
}

// unknownModels is the set of a pod whose model list is not known yet.
func unknownModels() *modelSet { return &modelSet{unknown: true} }

// initialModels is what u serves before anything is discovered: its listed
// models; none, until its first answer, when it discovers them and lists
// none (it may serve anything, but which is not known); every model
// (nil) otherwise.
func initialModels(u Upstream) *modelSet {
	if s := staticModels(u.Models); s != nil || !u.DiscoverModels {
		return s
	}
	return unknownModels()
}

func staticModels(ids []string) *modelSet {
	if len(ids) == 0 {
		return nil
	}
	s := &modelSet{ids: make(map[string]bool, len(ids))}
	for _, id := range ids {
		s.ids[id] = true
	}
	return s
}

// serves reports whether m takes requests for model; a pod that lists no
// models serves every model.
func (m *member) serves(model string) bool {
	s := m.models.Load()
	return s == nil || s.ids[model]
}

// knowsModels reports whether routing by model is on: some pod lists (or
// has discovered) the models it serves.
func (p *pool) knowsModels() bool {
	found := false
	p.each(func(m *member) bool {
		found = m.models.Load() != nil
		return !found
	})
	return found
}

// notServing lists the pods that do not serve model, whether any pod does,
// and how many pods' model lists are not known yet (they take no
// model-routed request until they are). Without routing by model every pod
// serves it.
func (p *pool) notServing(model string) (skip []string, anyServes bool, unknown int) {
	if !p.knowsModels() {
		return nil, true, 0
	}
	for _, m := range p.list() {
		switch s := m.models.Load(); {
		case s != nil && s.unknown:
			unknown++
			skip = append(skip, m.Name)
		case m.serves(model):
			anyServes = true
		default:
			skip = append(skip, m.Name)
		}
	}
	return skip, anyServes, unknown
}

// soleModel is the one model the pods list, for a request that names none
// while gatekeeper routes by model; false when they list several (or a pod
// lists none: it serves every model).
func (p *pool) soleModel() (string, bool) {
	sole, ok := "", true
	p.each(func(m *member) bool {
		s := m.models.Load()
		switch {
		case s == nil:
			ok = false
		case s.unknown:
		default:
			for id := range s.ids {
				if sole != "" && id != sole {
					ok = false
				}
				sole = id
			}
		}
		return ok
	})
	return sole, ok && sole != ""
}

// modelsKnown reports whether some pod that can take work knows its model
// list, or routing by model is off: /readyz waits for one.
func (p *pool) modelsKnown() bool {
	if !p.knowsModels() {
		return true
	}
	found := false
	p.each(func(m *member) bool {
		s := m.models.Load()
		found = !m.failing() && (s == nil || !s.unknown)
		return !found
	})
	return found
}

// serveModels answers GET /v1/models itself with the union of the models
// every pod serves: the pods' own entries where they were discovered,
// minimal OpenAI model objects where the policy lists them.
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request, ex *exchange) {
	seen := map[string]bool{}
	var data []json.RawMessage
	for _, m := range h.pool.list() {
		s := m.models.Load()
		if s == nil {
			continue
		}
		if s.entries != nil {
			for _, e := range s.entries {
				var id struct{ ID string }
				if json.Unmarshal(e, &id) == nil && !seen[id.ID] {
					seen[id.ID] = true
					data = append(data, e)
				}
			}
			continue
		}
		ids := make([]string, 0, len(s.ids))
		for id := range s.ids {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				e, _ := json.Marshal(map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "gatekeeper"})
				data = append(data, e)
			}
		}
	}
	body, _ := json.Marshal(struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{"list", append([]json.RawMessage{}, data...)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
	h.finish(r, ex, OutcomeServed, http.StatusOK)
}

// modelsLimit bounds a pod's GET /v1/models answer.
const modelsLimit = 1 << 20

// discoverModels reads m's own GET /v1/models and routes by its ids from
// then on; a failed or malformed answer keeps what m had.
func (h *Handler) discoverModels(ctx context.Context, c *http.Client, m *member) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL.JoinPath("/v1/models").String(), nil)
	if err != nil {
		return
	}
	res, err := c.Do(req)
	if err != nil {
		return
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, modelsLimit+1))
	if err != nil || res.StatusCode != http.StatusOK || len(b) > modelsLimit {
		return
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &list) != nil || len(list.Data) == 0 {
		return
	}
	s := &modelSet{ids: map[string]bool{}, entries: list.Data}
	for _, e := range list.Data {
		var id struct{ ID string }
		if json.Unmarshal(e, &id) == nil && id.ID != "" {
			s.ids[id.ID] = true
		}
	}
	if old := m.models.Load(); old == nil || !sameIDs(old.ids, s.ids) || !slices.EqualFunc(old.entries, s.entries, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
		m.models.Store(s)
	}
}

func sameIDs(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
