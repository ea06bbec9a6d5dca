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
// server's clock. KEYS[1] is the lock, KEYS[2] its token counter (see
// keyNames); ARGV[1] is the client id. Numbers that Redis must parse are
// formatted by Go or with string.format('%d'): Lua 5.1 prints large
// numbers in exponent form.
//
// acquire: ARGV[2] the lease in ms, ARGV[3] the counter's life in ms.
// Returns {1, token} when it took the lease (or extended its own), {0,
// pttl} when another client holds it.
var acquireScript = redis.NewScript(`
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = redis.call('HINCRBY', KEYS[2], 'token', 1)
if token < now then
  token = now
  redis.call('HSET', KEYS[2], 'token', string.format('%d', now))
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, token}
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
// Deletes this client's lease, records its token as released and
// announces the release. Returns 1 when it did, or when the lease with
// that token was already released (a retry of a release whose reply was
// lost: go-redis retries commands on network errors), else 0.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('HSET', KEYS[2], 'released', ARGV[2])
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  return 1
end
if ARGV[2] ~= '' and redis.call('HGET', KEYS[2], 'released') == ARGV[2] then
  return 1
end
return 0
`)
