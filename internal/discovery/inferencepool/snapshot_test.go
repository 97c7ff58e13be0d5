package inferencepool

import (
	"errors"
	"testing"
)

func TestEndpointAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    Endpoint
		want string
	}{
		{Endpoint{Pod: "p", ip: "10.0.0.1", port: 8000}, "10.0.0.1:8000"},
		{Endpoint{Pod: "p", ip: "fd00::7", port: 8000}, "[fd00::7]:8000"},
	}
	for _, tt := range tests {
		if got := tt.e.Addr(); got != tt.want {
			t.Errorf("%+v.Addr() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestSnapshotEqual(t *testing.T) {
	t.Parallel()
	ep := Endpoint{Pod: "p", ip: "10.0.0.1", port: 8000}
	snap := func(p Pool) Snapshot { return Snapshot{pools: map[Ref]Pool{refA: p}} }
	tests := []struct {
		name string
		a, b Snapshot
		want bool
	}{
		{"both empty", Snapshot{}, Snapshot{pools: map[Ref]Pool{}}, true},
		{"same endpoints", snap(found(ep)), snap(found(ep)), true},
		{"found without pods is not unknown", snap(found()), snap(Pool{}), false},
		{"another port", snap(found(ep)), snap(found(Endpoint{Pod: "p", ip: "10.0.0.1", port: 8001})), false},
		{"same error, new value", snap(Pool{Err: errors.New("x")}), snap(Pool{Err: errors.New("x")}), true},
		{"another error", snap(Pool{Err: errors.New("x")}), snap(Pool{Err: errors.New("y")}), false},
		{"another ref", snap(Pool{}), Snapshot{pools: map[Ref]Pool{refB: {}}}, false},
	}
	for _, tt := range tests {
		if got := tt.a.Equal(tt.b); got != tt.want {
			t.Errorf("%s: Equal() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Pool hands out a copy, so a caller cannot change what the watcher
// compares the next snapshot with.
func TestSnapshotPoolCopies(t *testing.T) {
	t.Parallel()
	s := Snapshot{pools: map[Ref]Pool{refA: found(Endpoint{Pod: "p", ip: "10.0.0.1", port: 8000})}}
	s.Pool(refA).Endpoints[0].port = 1
	if got := s.Pool(refA).Endpoints[0].port; got != 8000 {
		t.Fatalf("Pool().Endpoints[0].Port = %d after editing a copy, want 8000", got)
	}
	if p := s.Pool(refB); p.Found || p.Endpoints != nil {
		t.Fatalf("Pool(unwatched) = %+v, want the zero Pool", p)
	}
}
