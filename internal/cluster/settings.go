package cluster

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults.
const (
	// defaultKeyPrefix starts every key this package writes.
	defaultKeyPrefix = "gatekeeper:"
	// defaultTimeout bounds each Redis call. A healthy call takes about
	// 0.1 ms on loopback and well under 1 ms within a zone, so 5 ms is
	// several healthy round trips, yet a request pays at most 5 ms when
	// Redis stalls, and after DownAfter such calls none waits at all.
	defaultTimeout = 5 * time.Millisecond
	// defaultDialTimeout bounds opening one connection (TCP and TLS). Dials
	// run in the background of go-redis's pool, so a slow one delays no
	// request beyond Timeout; it only has to finish eventually.
	defaultDialTimeout = time.Second
	// defaultLeaseTTL is how long a lease on a pod's window lasts without
	// a renewal.
	defaultLeaseTTL = 10 * time.Second
	// defaultHeartbeatInterval is how often Run announces the replica and
	// renews its leases, when LeaseTTL/3 is not shorter. It is also how
	// long a shift of demand between replicas takes to move slots.
	defaultHeartbeatInterval = 500 * time.Millisecond
	// forgetLeases is how many LeaseTTLs an expired lease's floor stays
	// reserved (ForgetAfter's default): a replica cut off from Redis keeps
	// its floor that long before the others may take it.
	forgetLeases = 6
	// defaultDownAfter is how many consecutive failed calls switch to
	// local mode.
	defaultDownAfter = 3
	// maxTimeout is the largest Settings.Timeout accepted: beyond it a
	// stalled Redis would hold requests for a time clients notice.
	maxTimeout = time.Second
	// replicaBeats is how many heartbeat intervals a lease lasts at least.
	replicaBeats = 3
)

// Settings configures a Cluster. URL is required; the zero value of every
// other field selects its default.
type Settings struct {
	// URL names the Redis server: redis://[user[:password]@]host:port/db,
	// rediss:// for TLS (system roots unless CAFile is set) or
	// unix:///path?db=N, parsed by redis.ParseURL. Timeouts given in its
	// query are overridden by the fields below.
	URL string
	// PasswordFile, if set, names a file whose content (trimmed) is the
	// password; it overrides a password in URL. It is read once, by New; an
	// empty file is an error.
	PasswordFile string
	// CAFile, if set, names a PEM file of the certificate authorities that
	// sign the server's certificate, instead of the system roots. Only with
	// a rediss:// URL.
	CAFile string
	// KeyPrefix starts every key. Empty means DefaultKeyPrefix. Replicas that
	// share limits must use the same prefix; other gatekeeper deployments on
	// the same Redis must use another.
	KeyPrefix string
	// Timeout bounds each Redis call, from sending to reading the reply. 0
	// means DefaultTimeout; otherwise in (0, MaxTimeout].
	Timeout time.Duration
	// DialTimeout bounds opening one connection. 0 means DefaultDialTimeout;
	// otherwise > 0.
	DialTimeout time.Duration
	// LeaseTTL is how long a replica's lease on a pod's window (and its
	// announcement) lasts without a renewal. Past it the lease reserves
	// only the replica's floor, for ForgetAfter more. 0 means
	// DefaultLeaseTTL; otherwise at least 3 × HeartbeatInterval and at
	// least 1 ms.
	LeaseTTL time.Duration
	// ForgetAfter is how long an expired lease keeps its replica's floor
	// reserved before Redis deletes it: how long a replica cut off from
	// Redis may keep serving at its floor with no other replica taking
	// those slots, and how long a replica that died without leaving keeps
	// its floor from the others. 0 means 6 × LeaseTTL; otherwise > 0.
	ForgetAfter time.Duration
	// HeartbeatInterval is how often Run announces the replica, renews its
	// leases and, in local mode, probes Redis. 0 means
	// min(DefaultHeartbeatInterval, LeaseTTL/3); otherwise > 0.
	HeartbeatInterval time.Duration
	// ReplicaID names this replica in Redis; it must be unique among the
	// replicas and change when the process restarts. Empty means the host
	// name, a dash and 8 random hex digits.
	ReplicaID string
	// Replicas is the replica count assumed until the first heartbeat
	// answers: Share and the floor divide by it. 0 means 1; otherwise ≥ 1.
	Replicas int
	// DownAfter is how many consecutive failed or timed-out calls switch to
	// local mode. 0 means DefaultDownAfter; otherwise ≥ 1.
	DownAfter int
	// OnChange, if set, is called with the new mode after every switch
	// (true: shared, false: local), one call at a time; calls alternate and
	// the last one matches Up. It runs on the goroutine that caused the
	// switch (a request's, or Run's): it must return quickly and must not
	// call Beat.
	OnChange func(up bool)
	// Demand, if set, reports this replica's demand on each pod's window;
	// every heartbeat sends it, so the leases follow it. It must return
	// quickly and must not call into the Cluster. Nil: no demand (every
	// replica gets an even part).
	Demand func() map[string]Demand
	// OnShares, if set, is called after this replica's share of a pod's
	// window changed (Scale, Snapshot): a renewal moved it, the leases lapsed
	// to the floor, or SetPods ran. It runs on the goroutine that caused it
	// and must return quickly.
	OnShares func()
	// Now, if set, replaces Redis's clock inside every script and the
	// local clock for lease lapses and token batches. For tests and replays
	// on a virtual clock only: with it, replicas trust their own clocks.
	// Nil means Redis's clock in scripts and time.Now here.
	Now func() time.Time
}

// normalized checks s and returns a copy with the defaults filled in, and the
// go-redis options it maps to. The error joins one problem per invalid
// field, each naming the field.
func (s Settings) normalized() (Settings, *redis.Options, error) {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("cluster: Settings.%s = %v, want %s", field, v, want))
	}
	opt, err := s.redisOptions()
	if err != nil {
		errs = append(errs, err)
	}
	if s.Timeout < 0 || s.Timeout > maxTimeout {
		bad("Timeout", s.Timeout, fmt.Sprintf("in (0, %v]", maxTimeout))
	}
	if s.DialTimeout < 0 {
		bad("DialTimeout", s.DialTimeout, "> 0")
	}
	if s.LeaseTTL < 0 || s.LeaseTTL > 0 && s.LeaseTTL < time.Millisecond {
		bad("LeaseTTL", s.LeaseTTL, "≥ 1ms")
	}
	if s.ForgetAfter < 0 {
		bad("ForgetAfter", s.ForgetAfter, "> 0")
	}
	if s.HeartbeatInterval < 0 {
		bad("HeartbeatInterval", s.HeartbeatInterval, "> 0")
	}
	if s.Replicas < 0 {
		bad("Replicas", s.Replicas, "≥ 1")
	}
	if s.DownAfter < 0 {
		bad("DownAfter", s.DownAfter, "≥ 1")
	}
	if len(errs) > 0 {
		return s, nil, errors.Join(errs...)
	}
	s = s.withDefaults()
	if s.LeaseTTL < replicaBeats*s.HeartbeatInterval {
		bad("LeaseTTL", s.LeaseTTL, fmt.Sprintf("≥ 3 × HeartbeatInterval (%v)", s.HeartbeatInterval))
	}
	if s.ReplicaID == "" {
		id, err := defaultReplicaID()
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster: Settings.ReplicaID: %w", err))
		}
		s.ReplicaID = id
	}
	if len(errs) > 0 {
		return s, nil, errors.Join(errs...)
	}
	opt.DialTimeout = s.DialTimeout
	opt.ReadTimeout = s.Timeout
	opt.WriteTimeout = s.Timeout
	opt.ContextTimeoutEnabled = true // each call's context carries Timeout
	opt.MaxRetries = -1              // a retry would outlast Timeout; the heartbeat retries
	opt.DialerRetries = 1            // the same for dials
	opt.DisableIdentity = true       // no CLIENT SETINFO round trips on connect
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return s, opt, nil
}

func (s Settings) withDefaults() Settings {
	if s.KeyPrefix == "" {
		s.KeyPrefix = defaultKeyPrefix
	}
	if s.Timeout == 0 {
		s.Timeout = defaultTimeout
	}
	if s.DialTimeout == 0 {
		s.DialTimeout = defaultDialTimeout
	}
	if s.LeaseTTL == 0 {
		s.LeaseTTL = defaultLeaseTTL
	}
	if s.ForgetAfter == 0 {
		s.ForgetAfter = forgetLeases * s.LeaseTTL
	}
	if s.HeartbeatInterval == 0 {
		s.HeartbeatInterval = min(defaultHeartbeatInterval, s.LeaseTTL/replicaBeats)
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.DownAfter == 0 {
		s.DownAfter = defaultDownAfter
	}
	return s
}

// redisOptions parses URL and applies PasswordFile and CAFile.
func (s Settings) redisOptions() (*redis.Options, error) {
	if s.URL == "" {
		return nil, errors.New("cluster: Settings.URL is empty, want redis://host:port/db")
	}
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		return nil, fmt.Errorf("cluster: Settings.URL: %w", err)
	}
	var errs []error
	if s.PasswordFile != "" {
		b, err := os.ReadFile(s.PasswordFile)
		switch pw := strings.TrimSpace(string(b)); {
		case err != nil:
			errs = append(errs, fmt.Errorf("cluster: Settings.PasswordFile: %w", err))
		case pw == "":
			errs = append(errs, fmt.Errorf("cluster: Settings.PasswordFile: %s is empty", s.PasswordFile))
		default:
			opt.Password = pw
		}
	}
	if s.CAFile != "" {
		if err := addCAs(opt, s.CAFile); err != nil {
			errs = append(errs, err)
		}
	}
	return opt, errors.Join(errs...)
}

func addCAs(opt *redis.Options, path string) error {
	if opt.TLSConfig == nil {
		return errors.New("cluster: Settings.CAFile is set but Settings.URL is not rediss://")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cluster: Settings.CAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return fmt.Errorf("cluster: Settings.CAFile: %s holds no PEM certificate", path)
	}
	opt.TLSConfig.RootCAs = pool
	return nil
}

func defaultReplicaID() (string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "gatekeeper"
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return host + "-" + hex.EncodeToString(b[:]), nil
}
