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

// takeScript takes up to a batch of tokens from one GCRA bucket.
//
//	KEYS[1]  the bucket: the theoretical arrival time (TAT) in µs, a string
//	ARGV[1]  now in µs, or ''
//	ARGV[2]  the emission interval in µs (1e6 / QPS)
//	ARGV[3]  the burst
//	ARGV[4]  the most tokens to take, ≥ 1
//
// The bucket holds ⌊(now + burst × interval − max(TAT, now)) ÷ interval⌋
// tokens; m = min(that, ARGV[4]) are taken by advancing the TAT m
// intervals, and the key expires when the bucket would be full again. With
// no token it writes nothing. Returns {m, 0}, or {0, µs until one token}.
const takeScript = luaNow + `
local now = now_us(ARGV[1])
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local avail = math.floor((now + burst * interval - tat) / interval)
if avail < 1 then return {0, math.max(1, math.ceil(tat + interval - now - burst * interval))} end
local m = math.min(avail, want)
tat = tat + m * interval
-- Expiry runs on Redis's clock: with a caller's clock (tests) the two are
-- unrelated, so a key lives at least a minute of real time, or a slow
-- round trip would empty a bucket that the caller's clock still fills.
local floor_ms = 1
if ARGV[1] ~= '' then floor_ms = 60000 end
redis.call('SET', KEYS[1], string.format('%.0f', tat),
  'PX', string.format('%.0f', math.max(floor_ms, math.ceil((tat - now) / 1000))))
return {m, 0}
`

// beatScript is one heartbeat: it announces the replica, counts the live
// ones, and renews this replica's lease on each pod's window, granting it a
// fair part of what the others do not hold.
//
//	KEYS[1]   the replica set: member = replica id, score = expiry in ms
//	KEYS[2]   the epoch: when this Redis first saw a heartbeat (ms); a Redis
//	          that lost its data has none
//	KEYS[2+k] the lease hash of the k-th pod: field = replica id, value =
//	          "held expiry floor wants seq"
//	ARGV[1]   now in µs, or ''
//	ARGV[2]   the replica id
//	ARGV[3]   the lease time in ms
//	ARGV[4]   how long an expired lease's floor stays reserved, in ms
//	ARGV[5]   the beat's number, rising with every beat the replica sends
//	ARGV[6]   the write-back time in ms: how long after an epoch's start
//	          every replica still running has renewed once (see below)
//	ARGV[7]   prior: the most replicas the replica saw in the ForgetAfter
//	          before it learnt of this epoch (a Redis that lost its data), for
//	          LeaseTTL + ForgetAfter after that; else 0
//	then, per pod: base, cap, in_flight, wants, floor (slots of base), and
//	fresh: 1 when the replica was never granted a slot of the pod
//
// Per pod, with "others" every other replica's entry:
//   - an entry reserves its held slots until its expiry, then min(held,
//     floor) (what its replica keeps without Redis) until ForgetAfter more
//     has passed, when it is deleted;
//   - the fair target is a max-min fair division of base less the expired
//     reservations among the live entries by their wants, the slack split
//     evenly;
//   - in the first LeaseTTL + ForgetAfter of an epoch, each of the prior
//     replicas (ARGV[7]) beyond the entries the pod has (this replica's
//     included) is missing: it is taken to reserve the beating replica's
//     floor, counted among the others' and the expired reservations. One
//     that has not reached this Redis since it lost its data may be
//     running its floor alone, and would have kept it reserved that long
//     had Redis not lost it;
//   - the grant is the target, at most what the others (the missing
//     included) do not reserve, and during the first lease time of an
//     epoch (a Redis new or restarted empty) at most the cap the replica
//     runs now: until every live replica had a heartbeat to write back
//     what it holds, none grows. Except that a fresh replica (never granted
//     a slot of the pod) may take its floor, min(floor, base ÷ live
//     replicas), still within what the others do not reserve, once the
//     write-back time has passed since the epoch began and none is
//     missing: by then every replica still running has written back what
//     it holds, so what the others do not reserve is truly free. A missing
//     replica may still run its whole share until it lapses, LeaseTTL/2
//     after its last renewal, within the first lease time; so while one is
//     missing a fresh replica waits, as a holder does (the package comment
//     gives the argument);
//   - held = max(cap, in_flight, grant): slots above a shrunk grant still
//     run until they end, and a grant whose answer is lost is still counted;
//   - a beat whose number is not above the one its replica's entry holds
//     changes nothing: it was delayed on the way (a stalled link delivers
//     it late) and its cap and floor are older than what Redis has.
//
// So the entries of one pod never reserve more than base between them.
// Returns {live replicas, the epoch, then per pod: grant, target, free
// after}.
const beatScript = luaNow + `
local now = math.floor(now_us(ARGV[1]) / 1000)
local me = ARGV[2]
local ttl = tonumber(ARGV[3])
local forget = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), me)
keep(KEYS[1], ttl)
local epoch = tonumber(redis.call('GET', KEYS[2]) or '')
if not epoch then
  epoch = now
  redis.call('SET', KEYS[2], string.format('%.0f', now))
end
local warm = now < epoch + ttl
local settled = now >= epoch + tonumber(ARGV[6])
local young = now < epoch + ttl + forget
local live = redis.call('ZCARD', KEYS[1])
local out = {live, epoch}

-- fair returns me's part of capacity among parts ({id, wants}): max-min
-- fair by wants, what is left split evenly, the remainders by id.
local function fair(parts, capacity)
  if capacity <= 0 then return 0 end
  local n = #parts
  table.sort(parts, function(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[1] < b[1]
  end)
  local total = 0
  for _, p in ipairs(parts) do total = total + p[2] end
  if total > capacity then
    local left = capacity
    for i, p in ipairs(parts) do
      local a = math.min(p[2], math.floor(left / (n - i + 1)))
      if p[1] == me then return a end
      left = left - a
    end
    return 0
  end
  table.sort(parts, function(a, b) return a[1] < b[1] end)
  local slack = capacity - total
  local each = math.floor(slack / n)
  local extra = slack - each * n
  for i, p in ipairs(parts) do
    if p[1] == me then
      if i <= extra then return p[2] + each + 1 end
      return p[2] + each
    end
  end
  return 0
end

local seq = tonumber(ARGV[5])
local prior = tonumber(ARGV[7])
-- entry parses "held expiry floor wants [seq]" (seq absent: written by an
-- older gatekeeper, taken as 0).
local function entry(v)
  local held, exp, fl, w, n = string.match(v or '', '^(%d+) (%d+) (%d+) (%d+) ?(%d*)$')
  return tonumber(held), tonumber(exp), tonumber(fl), tonumber(w), tonumber(n) or 0
end

local a = 8
for k = 3, #KEYS do
  local key = KEYS[k]
  local base = tonumber(ARGV[a])
  local cap = tonumber(ARGV[a + 1])
  local inflight = tonumber(ARGV[a + 2])
  local wants = tonumber(ARGV[a + 3])
  local floor = tonumber(ARGV[a + 4])
  local fresh = ARGV[a + 5] == '1'
  a = a + 6
  local others, expired, present = 0, 0, 1
  local parts = {{me, wants}}
  local _, _, _, _, mine = entry(redis.call('HGET', key, me))
  local h = redis.call('HGETALL', key)
  if mine >= seq then h = {} end -- a late beat: below, it writes nothing
  for i = 1, #h, 2 do
    local id = h[i]
    if id ~= me then
      local held, exp, fl, w = entry(h[i + 1])
      if not held or now > exp + forget then
        redis.call('HDEL', key, id)
      elseif now > exp then
        local r = math.min(held, fl)
        others = others + r
        expired = expired + r
        present = present + 1
      else
        others = others + held
        parts[#parts + 1] = {id, w}
        present = present + 1
      end
    end
  end
  if mine >= seq then
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = 0
  else
    local missing = 0
    if young and prior > present then missing = prior - present end
    -- the missing replicas, which this epoch has not heard from: their floors
    others = others + missing * floor
    expired = expired + missing * floor
    local target = fair(parts, base - expired)
    local grant = math.min(target, base - others)
    if warm then
      local most = cap
      if fresh and settled and missing == 0 then
        most = math.max(cap, math.min(floor, math.floor(base / live)))
      end
      if grant > most then grant = most end
    end
    if grant < 0 then grant = 0 end
    local held = math.max(cap, inflight, grant)
    redis.call('HSET', key, me, string.format('%.0f %.0f %.0f %.0f %.0f', held, now + ttl,
      math.min(math.max(cap, grant), floor), wants, seq))
    keep(key, ttl + forget)
    out[#out + 1] = grant
    out[#out + 1] = target
    out[#out + 1] = math.max(0, base - others - held)
  end
end
return out
`

// leaveScript withdraws a replica: its announcement and its entry in each
// pod's lease hash, so the others may take its slots at once.
//
//	KEYS[1]   the replica set
//	KEYS[2…]  the lease hashes of the pods it held leases on
//	ARGV[1]   the replica id
const leaveScript = `
redis.call('ZREM', KEYS[1], ARGV[1])
for k = 2, #KEYS do redis.call('HDEL', KEYS[k], ARGV[1]) end
return 1
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
	take, beat, leave, count *redis.Script
	quotaCharge, quotaSettle *redis.Script
}

func newScripts() scripts {
	return scripts{
		take:  redis.NewScript(takeScript),
		beat:  redis.NewScript(beatScript),
		leave: redis.NewScript(leaveScript),
		count: redis.NewScript(countScript),

		quotaCharge: redis.NewScript(quotaChargeScript),
		quotaSettle: redis.NewScript(quotaSettleScript),
	}
}
