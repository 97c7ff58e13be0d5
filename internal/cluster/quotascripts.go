package cluster

// The token quotas' scripts (see quota.go). Each window of each key is one
// hash: field "lo" is the oldest bucket that may hold tokens, "sum" the
// tokens of the buckets from lo on, and each bucket is a field named by its
// index (the time in µs divided by the bucket's length, rounded down) that
// holds its tokens. A bucket b is counted while the current bucket is at
// most b + past, so every charge is counted for at least the window's
// length; the key expires when its newest bucket stops being counted.

// luaQuota defines the helpers of both scripts, after luaNow.
const luaQuota = luaNow + `
local function fmt(n) return string.format('%.0f', n) end
-- trim drops key's buckets before oldest and returns the tokens it still
-- counts. Every write trims first, so every bucket kept is within past + 1
-- of lo: a lo further back than that means all of them expired.
local function trim(key, oldest, past)
  local v = redis.call('HMGET', key, 'lo', 'sum')
  local lo, sum = tonumber(v[1]), tonumber(v[2]) or 0
  if not lo then return 0 end
  if lo >= oldest then return sum end
  if oldest - lo > past + 1 then
    redis.call('DEL', key)
    return 0
  end
  for b = lo, oldest - 1 do
    local x = tonumber(redis.call('HGET', key, fmt(b)))
    if x then
      sum = sum - x
      redis.call('HDEL', key, fmt(b))
    end
  end
  redis.call('HSET', key, 'lo', fmt(oldest), 'sum', fmt(sum))
  return sum
end
-- add adds v tokens to bucket b of key, trimmed, and keeps key until b
-- stops being counted.
local function add(key, b, v, g, past, now)
  if v == 0 then return end
  redis.call('HINCRBY', key, fmt(b), v)
  redis.call('HINCRBY', key, 'sum', v)
  local lo = tonumber(redis.call('HGET', key, 'lo'))
  if not lo or b < lo then redis.call('HSET', key, 'lo', fmt(b)) end
  keep(key, math.max(1, math.ceil(((b + past + 1) * g - now) / 1000)))
end
`

// quotaChargeScript charges one request's estimate against every window
// of every applicable key, all or nothing.
//
//	KEYS[i]  one window of one key (see above)
//	ARGV[1]  now in µs, or ''
//	ARGV[2]  the estimate in tokens, ≥ 0
//	ARGV[3]  '1': charge even when a window lacks room (quota.Ask.Force)
//	then per key: the bucket's length in µs, past (buckets counted before
//	the current one), the limit (0: none)
//
// A window has room when its tokens plus the charge (the estimate, at most
// the limit) are at most the limit. When one lacks room, the window whose
// room comes last is reported and, unless forced, nothing is written.
// Returns {charged (1 or 0), the refusing key's index (0: none), its
// tokens, its charge, µs until it has room}, then when charged, per key,
// the bucket charged and the charge.
const quotaChargeScript = luaQuota + `
local now = now_us(ARGV[1])
local est = tonumber(ARGV[2])
local force = ARGV[3] == '1'
local st = {}
local worst, wused, wcharge, wwait = 0, 0, 0, -1
for i = 1, #KEYS do
  local a = 4 + 3 * (i - 1)
  local g, past, limit = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local cur = math.floor(now / g)
  local oldest = cur - past
  local used = trim(KEYS[i], oldest, past)
  local charge = est
  if limit > 0 and charge > limit then charge = limit end
  st[i] = {g, past, cur, charge}
  if limit > 0 and used + charge > limit then
    -- the oldest buckets expire first: when have enough of them?
    local need, freed, b = used + charge - limit, 0, cur
    for x = oldest, cur do
      freed = freed + (tonumber(redis.call('HGET', KEYS[i], fmt(x))) or 0)
      if freed >= need then
        b = x
        break
      end
    end
    local wait = (b + past + 1) * g - now
    if wait > wwait then worst, wused, wcharge, wwait = i, used, charge, wait end
  end
end
local out = {0, worst, wused, wcharge, math.max(wwait, 0)}
if worst > 0 and not force then return out end
out[1] = 1
for i = 1, #KEYS do
  local s = st[i]
  add(KEYS[i], s[3], s[4], s[1], s[2], now)
  out[#out + 1] = s[3]
  out[#out + 1] = s[4]
end
return out
`

// quotaSettleScript trues up one charge.
//
//	KEYS[i]  one window of one key, as charged
//	ARGV[1]  now in µs, or ''
//	then per key: the bucket's length in µs, past, the bucket charged,
//	the difference (actual − charge) in tokens
//
// The difference goes into the bucket charged while it is counted (a
// refund never below 0); once it expired, an excess goes into the current
// bucket and a refund is dropped. Returns 1.
const quotaSettleScript = luaQuota + `
local now = now_us(ARGV[1])
for i = 1, #KEYS do
  local a = 2 + 4 * (i - 1)
  local g, past = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local b, delta = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local cur = math.floor(now / g)
  local oldest = cur - past
  trim(KEYS[i], oldest, past)
  if b >= oldest then
    if delta < 0 then
      local old = tonumber(redis.call('HGET', KEYS[i], fmt(b))) or 0
      if -delta > old then delta = -old end
    end
    add(KEYS[i], b, delta, g, past, now)
  elseif delta > 0 then
    add(KEYS[i], cur, delta, g, past, now)
  end
end
return 1
`
