package cluster

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each runs atomically inside Redis and reads the time once,
// from Redis's clock, unless its first argument carries a time (Settings.Now,
// for tests). Numbers stay below 2^53 (microseconds since 1970 are about
// 1.8e15), so Lua's doubles hold them exactly; they are written back with
// string.format('%.0f') so that no exponent notation reaches Redis.
//
// redis.replicate_commands() lets a script write after reading TIME on
// Redis 3.2–4 (effects replication); on Redis 5 and later it is the default
// and the call is a no-op.

// luaNow defines now_us(arg): the time in microseconds, from arg when it is
// not empty, from Redis's clock otherwise.
const luaNow = `
if redis.replicate_commands then redis.replicate_commands() end
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- keep extends key's expiry to at least ms milliseconds.
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
`

// limitScript is a GCRA over one or two buckets, client first.
//
//	KEYS[i]      a bucket: the theoretical arrival time (TAT) in µs, a string
//	ARGV[1]      now in µs, or ''
//	ARGV[2i]     the bucket's emission interval in µs (1e6 / QPS)
//	ARGV[2i+1]   the bucket's burst
//
// A request is admitted when, for every bucket, max(TAT, now) + interval lies
// no further than burst × interval ahead of now; then every TAT advances and
// its key expires when the bucket would be full again. A refusal writes
// nothing. Returns {1, 0, 0} when admitted, or {0, i, wait µs} naming the
// first bucket that refused and how long until it holds a token.
const limitScript = luaNow + `
local now = now_us(ARGV[1])
local tats = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  local new = tat + interval
  local over = new - now - burst * interval
  if over > 0 then return {0, i, math.ceil(over)} end
  tats[i] = new
end
-- Expiry runs on Redis's clock: with a caller's clock (tests) the two are
-- unrelated, so a key lives at least a minute of real time, or a slow
-- round trip would empty a bucket that the caller's clock still fills.
local floor_ms = 1
if ARGV[1] ~= '' then floor_ms = 60000 end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], string.format('%.0f', tats[i]),
    'PX', string.format('%.0f', math.max(floor_ms, math.ceil((tats[i] - now) / 1000))))
end
return {1, 0, 0}
`

// acquireScript adds a lease's slots to a pod's set if they fit under the
// limit with the live ones, or if none is live (a request above the whole
// window runs alone).
//
//	KEYS[1]  the pod's lease set: member = one slot of a lease, score = expiry in ms
//	ARGV[1]  now in µs, or ''
//	ARGV[2]  the lease time in ms
//	ARGV[3]  the limit
//	ARGV[4…] the new lease's members, one per slot
//
// Expired members are dropped first, so a dead replica's slots are free again
// once its leases expire. Returns {1, live} when added, {0, live} otherwise.
const acquireScript = luaNow + `
local now = math.floor(now_us(ARGV[1]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
local k = #ARGV - 3
if n > 0 and n + k > tonumber(ARGV[3]) then return {0, n} end
local exp = string.format('%.0f', now + ttl)
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], exp, ARGV[i])
end
keep(KEYS[1], ttl)
return {1, n + k}
`

// beatScript is one heartbeat: it announces the replica, counts the live
// ones, and writes every lease the replica holds with a fresh expiry.
//
//	KEYS[1]   the replica set: member = replica id, score = expiry in ms
//	KEYS[1+k] the lease set of the k-th pod this replica holds leases in
//	ARGV[1]   now in µs, or ''
//	ARGV[2]   the replica id
//	ARGV[3]   how long the announcement lasts, in ms
//	ARGV[4]   the lease time in ms
//	then, per pod: the number of leases c, then c lease ids
//
// ZADD without XX: a lease that expired while Redis was unreachable, or was
// never written (taken in local mode), is written again; it is still running.
// Returns the number of live replicas, this one included.
const beatScript = luaNow + `
local now = math.floor(now_us(ARGV[1]) / 1000)
local rttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], string.format('%.0f', now + rttl), ARGV[2])
keep(KEYS[1], rttl)
local ttl = tonumber(ARGV[4])
local exp = string.format('%.0f', now + ttl)
local a = 5
for k = 2, #KEYS do
  local c = tonumber(ARGV[a])
  a = a + 1
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
  for j = 1, c do
    redis.call('ZADD', KEYS[k], exp, ARGV[a])
    a = a + 1
  end
  keep(KEYS[k], ttl)
end
return redis.call('ZCARD', KEYS[1])
`

// countScript counts the live members of a set whose scores are expiries in
// ms: the leases of a pod, or the replicas.
//
//	KEYS[1]  the set
//	ARGV[1]  now in µs, or ''
const countScript = luaNow + `
local now = math.floor(now_us(ARGV[1]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')
`

// scripts holds the loaded scripts of one Cluster. redis.Script caches its
// SHA and falls back from EVALSHA to EVAL when Redis lost its script cache
// (a restart), so each call stays one round trip in the common case.
type scripts struct {
	limit, acquire, beat, count *redis.Script
}

func newScripts() scripts {
	return scripts{
		limit:   redis.NewScript(limitScript),
		acquire: redis.NewScript(acquireScript),
		beat:    redis.NewScript(beatScript),
		count:   redis.NewScript(countScript),
	}
}
