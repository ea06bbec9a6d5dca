package redislock

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// tokenRetention is how long a lock's token counter outlives the lease's
// last acquisition, renewal or release. The next token is the counter plus
// one or the server's clock in microseconds, whichever is greater, so a key
// unused for longer starts again from the clock, above every token it had,
// unless the server's clock stepped back by more than this meanwhile.
const tokenRetention = time.Hour

// The scripts, one per operation, each a single atomic step on the
// server's clock. KEYS are the lock, its token counter, its queue and the
// queue's places (see keyNames); ARGV[1] is the client id. Numbers that
// Redis must parse are formatted by Go or with string.format('%d'): Lua
// 5.1 prints large numbers in exponent form.
//
// prelude defines what the scripts that take, give or queue for a lease
// share.
const prelude = `
local lock, counter, queue, places = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local nowus, nowms

-- clock reads the server's clock once, when a script first needs it.
local function clock()
  if not nowus then
    local t = redis.call('TIME')
    nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
    nowms = math.floor(nowus / 1000)
  end
end

-- issue returns the lock's next token and keeps the counter for life ms.
local function issue(life)
  clock()
  local token = redis.call('HINCRBY', counter, 'token', 1)
  if token < nowus then
    token = nowus
    redis.call('HSET', counter, 'token', string.format('%d', nowus))
  end
  redis.call('PEXPIRE', counter, string.format('%d', life))
  return token
end

-- first returns the first waiter whose place has not lapsed and the lease
-- length it asked for, dropping the lapsed places before it.
local function first()
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return nil
    end
    local place = redis.call('HGET', places, head)
    clock()
    if place then
      local expires, ttl = string.match(place, '^(%d+) (%d+)$')
      if expires and tonumber(expires) > nowms then
        return head, ttl
      end
    end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', places, head)
  end
end

local function leave(who)
  redis.call('ZREM', queue, who)
  redis.call('HDEL', places, who)
end

-- wait puts who in the queue, keeping its arrival, for place ms from now,
-- asking for a lease of ttl ms.
local function wait(who, ttl, place)
  clock()
  redis.call('ZADD', queue, 'NX', string.format('%d', nowus), who)
  redis.call('HSET', places, who, string.format('%d %s', nowms + tonumber(place), ttl))
  for _, k in ipairs({queue, places}) do
    if redis.call('PTTL', k) < tonumber(place) then
      redis.call('PEXPIRE', k, place)
    end
  end
end

-- giveUp ends the caller's lease, recording its token as released unless
-- that is '': it hands the lease to the first waiter, with a new token,
-- and tells that waiter, or deletes the lock and tells everyone.
local function giveUp(released, retention, channel, announcement)
  if released ~= '' then
    redis.call('HSET', counter, 'released', released)
  end
  local head, ttl = first()
  if head then
    redis.call('SET', lock, head, 'PX', ttl)
    issue(tonumber(ttl) + tonumber(retention))
    leave(head)
    redis.call('PUBLISH', channel, announcement .. ' ' .. head)
  else
    redis.call('DEL', lock)
    redis.call('PEXPIRE', counter, retention)
    redis.call('PUBLISH', channel, announcement)
  end
end
`

// acquire: ARGV[2] the lease in ms, ARGV[3] the counter's life in ms,
// ARGV[4] '1' to wait in the queue if the lease is not taken, ARGV[5] how
// long a place lasts in ms. It takes the lease when this client holds it,
// or when it is free and no live waiter of another client is ahead.
// Returns {1, token} when it took the lease (or extended its own), {0}
// otherwise.
var acquireScript = redis.NewScript(prelude + `
local me, ttl = ARGV[1], ARGV[2]
local owner = redis.call('GET', lock)
local head = nil
if owner ~= me then
  if not owner then
    head = first()
  end
  if owner or (head and head ~= me) then
    if ARGV[4] == '1' then
      wait(me, ttl, ARGV[5])
    end
    return {0}
  end
end
redis.call('SET', lock, me, 'PX', ttl)
if head == me then
  leave(me) -- a client that holds the lease or has no place is not in the queue
end
return {1, issue(tonumber(ARGV[3]))}
`)

// renew: ARGV[2] the lease in ms, ARGV[3] the counter's life in ms.
// Returns 1 when it extended this client's unexpired lease, else 0: an
// expired key is gone, so a renewal never revives it.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`)

// release: ARGV[2] the token of the lease released (” if unknown), ARGV[3]
// the counter's life in ms, ARGV[4] the channel, ARGV[5] the announcement.
// Ends this client's lease (giveUp). Returns 1 when it did, or when the
// lease with that token was already released (a retry of a release whose
// reply was lost: go-redis retries commands on network errors), else 0.
var releaseScript = redis.NewScript(prelude + `
if redis.call('GET', lock) == ARGV[1] then
  giveUp(ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  return 1
end
if ARGV[2] ~= '' and redis.call('HGET', counter, 'released') == ARGV[2] then
  return 1
end
return 0
`)

// handed returns {1, token, pttl} when this client holds the lease, else
// {0}.
var handedScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
return {1, tonumber(redis.call('HGET', KEYS[2], 'token') or '0'), redis.call('PTTL', KEYS[1])}
`)

// leave: ARGV[2] '1' to give back a lease this client holds, ARGV[3] the
// counter's life in ms, ARGV[4] the channel, ARGV[5] the announcement.
// Takes this client out of the queue and, if asked, ends its lease
// (giveUp). Returns 1 when it gave a lease back, else 0.
var leaveScript = redis.NewScript(prelude + `
leave(ARGV[1])
if ARGV[2] == '1' and redis.call('GET', lock) == ARGV[1] then
  giveUp('', ARGV[3], ARGV[4], ARGV[5])
  return 1
end
return 0
`)
