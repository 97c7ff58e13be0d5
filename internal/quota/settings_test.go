package quota

import (
	"strings"
	"testing"
)

func TestNewInvalid(t *testing.T) {
	t.Parallel()
	if _, err := New(Settings{maxClients: -1}); err == nil || !strings.Contains(err.Error(), "Settings.MaxClients = -1") {
		t.Errorf("New(MaxClients -1) = %v, want an error naming Settings.MaxClients", err)
	}
}

// TestLimitsInvalid: Validate (and SetLimits) name every invalid field at
// once, and a refused SetLimits changes nothing.
func TestLimitsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits Limits
		want   []string
	}{
		{"valid", Limits{PerClient: Limit{PerMinute: 1}, Clients: map[string]Limit{ClientName("k"): {}},
			Classes: map[string]Limit{"a": {PerDay: 2}}, Models: map[string]Limit{"m": {}}}, nil},
		{"negative", Limits{PerClient: Limit{PerMinute: -1, PerDay: -2}, Models: map[string]Limit{"m": {PerDay: -3}}},
			[]string{"Limits.PerClient.PerMinute = -1", "Limits.PerClient.PerDay = -2", `Limits.Models["m"].PerDay = -3`}},
		{"client names", Limits{Clients: map[string]Limit{"alice": {}, "sha256:abc": {}, "sha256:" + strings.Repeat("g", 64): {}}},
			[]string{`Limits.Clients["alice"]`, `Limits.Clients["sha256:abc"]`, `Limits.Clients["sha256:ggg`}},
		{"empty names", Limits{Classes: map[string]Limit{"": {PerMinute: 1}}, Models: map[string]Limit{"": {PerMinute: -1}}},
			[]string{`Limits.Classes[""]: the name is empty`, `Limits.Models[""]: the name is empty`, `Limits.Models[""].PerMinute = -1`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, _ := newQuotas(t, Settings{})
			if err := q.SetLimits(Limits{Classes: map[string]Limit{"x": {PerMinute: 1}}}); err != nil {
				t.Fatal(err)
			}
			err := q.SetLimits(tt.limits)
			if (err != nil) != (tt.want != nil) {
				t.Fatalf("SetLimits() = %v, want errors %v", err, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("SetLimits() = %v, want it to name %s", err, w)
				}
			}
			if err == nil {
				return
			}
			if _, ok := q.Snapshot().Classes["x"]; !ok {
				t.Errorf("a refused SetLimits changed the limits: %+v", q.Snapshot())
			}
		})
	}
}
