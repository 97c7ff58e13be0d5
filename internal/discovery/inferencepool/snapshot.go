package inferencepool

import (
	"cmp"
	"maps"
	"net"
	"slices"
	"strconv"
)

// Ref names one InferencePool.
type Ref struct {
	Namespace string
	Name      string
}

// String returns "namespace/name", the form kubectl prints.
func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// Endpoint is one target port of one ready pod of a pool.
type Endpoint struct {
	// Pod is the pod's name; its namespace is the pool's.
	Pod string
	// ip is the pod's primary IP, IPv4 or IPv6, without brackets.
	ip string
	// port is one of the pool's target ports, 1 to 65535.
	port int
}

// Addr returns "ip:port", with an IPv6 address in brackets.
func (e Endpoint) Addr() string { return net.JoinHostPort(e.ip, strconv.Itoa(e.port)) }

// compareEndpoints orders endpoints by pod name, then port, so a snapshot
// does not depend on the order the informers happened to list pods in.
func compareEndpoints(a, b Endpoint) int {
	return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.port, b.port), cmp.Compare(a.ip, b.ip))
}

// Pool is what a snapshot knows about one pool.
//
// Found false means the pool gives no answer: it does not exist (not yet
// created, or deleted), its pool or pod list has not been read yet, or its
// spec cannot be used (Err says why). A caller should keep the endpoints it
// had rather than read this as a pool with no pods. Found true with no
// Endpoints means the pool exists and none of its pods is ready.
type Pool struct {
	Found bool
	// Err, when not nil, says why an existing pool's spec cannot be used;
	// Found is then false.
	Err error
	// Endpoints are sorted by pod name, then port. Nil unless Found.
	Endpoints []Endpoint
}

// equal compares two pools; errors compare by message, since a recomputed
// snapshot builds new error values for the same fault.
func (p Pool) equal(o Pool) bool {
	if p.Found != o.Found || (p.Err == nil) != (o.Err == nil) || !slices.Equal(p.Endpoints, o.Endpoints) {
		return false
	}
	return p.Err == nil || p.Err.Error() == o.Err.Error()
}

// Snapshot is the state of every watched pool at one moment. The zero value
// is an empty snapshot. A Snapshot is immutable and safe for concurrent use.
type Snapshot struct {
	pools map[Ref]Pool
}

// Pool returns what the snapshot knows about r, with its own copy of the
// endpoints. A pool the watcher was not asked to watch is not Found.
func (s Snapshot) Pool(r Ref) Pool {
	p := s.pools[r]
	p.Endpoints = slices.Clone(p.Endpoints)
	return p
}

// Refs returns the watched pools, sorted by namespace, then name.
func (s Snapshot) Refs() []Ref {
	return slices.SortedFunc(maps.Keys(s.pools), func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// Equal reports whether s and o watch the same pools and know the same about
// each of them.
func (s Snapshot) Equal(o Snapshot) bool {
	return maps.EqualFunc(s.pools, o.pools, Pool.equal)
}
