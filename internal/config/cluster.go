package config

import (
	"cmp"
	"net/url"
	"time"
)

// Cluster shares limits and windows between gatekeeper replicas through
// Redis (DESIGN §10). Optional: without it each replica decides alone.
type Cluster struct {
	// Redis names the server and how to reach it.
	Redis ClusterRedis `yaml:"redis"`
	// KeyPrefix starts every key gatekeeper writes ("" means "gatekeeper:");
	// replicas that share limits use the same prefix.
	KeyPrefix string `yaml:"key_prefix"`
	// Timeout bounds one Redis call (0: 5ms; at most 1s). A slower Redis
	// is treated as down and each replica falls back to its share.
	Timeout time.Duration `yaml:"timeout"`
	// LeaseTTL is how long a replica's lease on a pod's window lasts
	// without a renewal (0: 10s; at least 3 × heartbeat); a silent
	// replica's floor stays reserved 6 lease times more.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Heartbeat is how often a replica announces itself and renews its
	// lease on each pod's window (0: min(500ms, lease_ttl/3)): how fast
	// slots follow demand between replicas.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// ReplicaID names this replica ("" means the hostname and a random
	// suffix).
	ReplicaID string `yaml:"replica_id"`
	// Replicas is how many replicas run (0: 1): until Redis first answers,
	// each replica takes 1/replicas of every limit and window.
	Replicas int `yaml:"replicas"`
}

// ClusterRedis is the Redis server of a Cluster.
type ClusterRedis struct {
	// URL: redis://host:port/db, rediss:// for TLS.
	URL string `yaml:"url"`
	// PasswordFile, if set, holds the password (trimmed), so it stays out
	// of the policy; it overrides one in URL.
	PasswordFile string `yaml:"password_file"`
	// CAFile, if set, holds the PEM certificate authorities of a rediss://
	// server instead of the system roots.
	CAFile string `yaml:"ca_file"`
}

func (k *checker) cluster(c *Cluster) {
	if c == nil {
		return
	}
	u, err := url.Parse(c.Redis.URL)
	switch {
	case c.Redis.URL == "":
		k.add("cluster.redis.url", "is required (redis://host:port/db)")
	case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix"):
		k.add("cluster.redis.url", "must be a redis://, rediss:// or unix:// URL, got %q", c.Redis.URL)
	}
	if c.Redis.CAFile != "" && (err != nil || u.Scheme != "rediss") {
		k.add("cluster.redis.ca_file", "needs a rediss:// url")
	}
	if c.Timeout < 0 || c.Timeout > time.Second {
		k.add("cluster.timeout", "must be 0 (5ms) or at most 1s, got %v", c.Timeout)
	}
	if c.Replicas < 0 {
		k.add("cluster.replicas", "must be 0 (1) or more, got %d", c.Replicas)
	}
	k.notNegative("cluster.lease_ttl", c.LeaseTTL, "")
	k.notNegative("cluster.heartbeat", c.Heartbeat, "")
	if ttl := cmp.Or(c.LeaseTTL, 10*time.Second); c.LeaseTTL >= 0 && c.Heartbeat > 0 && ttl < 3*c.Heartbeat {
		k.add("cluster.lease_ttl", "must be at least 3 × cluster.heartbeat (%v), got %v (0 means 10s)", c.Heartbeat, c.LeaseTTL)
	}
}
