package redislock

import (
	"crypto/sha256"
	"encoding/hex"
)

// The Redis names of a lock. For prefix P, region R and a caller's key K:
//
//	P{R:K}          the lock: a string holding the owner's client id, with
//	                the lease's expiry (PX) on the server's clock
//	P{R:K}:token    the fencing token counter: a hash, kept for tokenRetention
//	                after the lease's last acquisition, renewal or release
//	P{R:K}:queue    the waiters' client ids by arrival: a sorted set
//	P{R:K}:places   when each waiter's place lapses, and the lease length
//	                it asked for: a hash; both expire with the last place
//	P{R}:released   the pub/sub channel of the prefix and region
//
// The names are injective: P has no '{', R no ':', and the key kinds end
// differently. Redis Cluster hashes only what lies between the first
// '{' and the first '}' after it; both keys of a lock share everything up
// to the lock key's closing '}', so they always hash to the same slot, also
// when K itself contains braces, and one script may touch all of them.
type names struct {
	lock, token, queue, places string
}

func keyNames(prefix, region, key string) names {
	lock := prefix + "{" + region + ":" + key + "}"
	return names{lock: lock, token: lock + ":token", queue: lock + ":queue", places: lock + ":places"}
}

// all returns the keys in the order the scripts expect them.
func (n names) all() []string { return []string{n.lock, n.token, n.queue, n.places} }

func channelName(prefix, region string) string { return prefix + "{" + region + "}:released" }

// announcement is what a release publishes for key, and what a waiter for
// key listens for: a digest, so that messages stay short whatever the key.
// Two keys with the same digest only wake each other's waiters needlessly.
func announcement(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}
