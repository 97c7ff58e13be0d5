package pods

import (
	"bytes"
	"encoding/json"
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

// initialModels is what p serves before anything is discovered: its listed
// models; none, until its first answer, when it discovers them and lists
// none (it may serve anything, but which is not known); every model (nil)
// otherwise.
func initialModels(p Pod) *modelSet {
	if s := staticModels(p.Models); s != nil || !p.DiscoverModels {
		return s
	}
	return &modelSet{unknown: true}
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
func (m *Member) serves(model string) bool {
	s := m.models.Load()
	return s == nil || s.ids[model]
}

// SetDiscovered records the entries of the pod's own GET /v1/models: it is
// routed by their ids from then on. Entries without an id are kept for the
// listing but route nothing; an empty list changes nothing.
func (m *Member) SetDiscovered(entries []json.RawMessage) {
	if len(entries) == 0 {
		return
	}
	s := &modelSet{ids: map[string]bool{}, entries: entries}
	for _, e := range entries {
		var id struct{ ID string }
		if json.Unmarshal(e, &id) == nil && id.ID != "" {
			s.ids[id.ID] = true
		}
	}
	if old := m.models.Load(); old == nil || !sameIDs(old.ids, s.ids) ||
		!slices.EqualFunc(old.entries, s.entries, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
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

// KnowsModels reports whether routing by model is on: some pod lists (or
// has discovered) the models it serves.
func (r *Registry) KnowsModels() bool {
	found := false
	r.each(func(m *Member) bool {
		found = m.models.Load() != nil
		return !found
	})
	return found
}

// NotServing lists the pods that do not serve model, whether any pod does,
// and how many pods' model lists are not known yet (they take no
// model-routed request until they are). Without routing by model every pod
// serves it.
func (r *Registry) NotServing(model string) (skip []string, anyServes bool, unknown int) {
	if !r.KnowsModels() {
		return nil, true, 0
	}
	for _, m := range r.List() {
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

// SoleModel is the one model the pods list, for a request that names none
// while routing by model; false when they list several (or a pod lists
// none: it serves every model).
func (r *Registry) SoleModel() (string, bool) {
	sole, ok := "", true
	r.each(func(m *Member) bool {
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

// ModelsKnown reports whether some pod that can take work knows its model
// list, or routing by model is off: readiness waits for one.
func (r *Registry) ModelsKnown() bool {
	if !r.KnowsModels() {
		return true
	}
	found := false
	r.each(func(m *Member) bool {
		s := m.models.Load()
		found = !m.failing() && (s == nil || !s.unknown)
		return !found
	})
	return found
}

// modelEntries is the union of the models every pod serves, as OpenAI model
// objects: the pods' own entries where they were discovered, minimal ones
// where the policy lists them; each id once, in pod-name order.
func (r *Registry) modelEntries() []json.RawMessage {
	seen := map[string]bool{}
	data := []json.RawMessage{}
	for _, m := range r.List() {
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
	return data
}

// ModelList is GET /v1/models's answer: {"object":"list","data":
// ModelEntries}.
func (r *Registry) ModelList() []byte {
	body, _ := json.Marshal(struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{"list", r.modelEntries()})
	return body
}

// ModelPods is, with routing by model, each model a pod lists and the pods
// that serve it, by name: those that list it and those that list none (they
// serve every model); a pod whose list is not known yet serves none. Nil
// without routing by model. A model no pod lists is in none: the models are
// the operator's (the policy's lists, the pods' own), never a client's.
func (r *Registry) ModelPods() map[string][]string {
	if !r.KnowsModels() {
		return nil
	}
	out := map[string][]string{}
	var every []string // pods that serve every model
	for _, m := range r.List() {
		switch s := m.models.Load(); {
		case s == nil:
			every = append(every, m.Name)
		case !s.unknown:
			for id := range s.ids {
				out[id] = append(out[id], m.Name)
			}
		}
	}
	for id, names := range out {
		out[id] = slices.Sorted(slices.Values(append(names, every...)))
	}
	return out
}
