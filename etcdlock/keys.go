package etcdlock

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// The etcd keys of a lock. For prefix P (ending in '/'), region R (no '/'
// or NUL), a caller's key K and a client id C:
//
//	P R NUL                the namespace of the prefix and region
//	P R NUL name(K) NUL    the directory of K's lock
//	... NUL name(K) NUL C  C's entry: C holds the lock, or waits for it;
//	                       the holder is the entry created first
//
// name(K) is len(K) in decimal, ':' and K for keys of up to maxRawKey
// bytes, and '#' and the hex SHA-256 of K for longer ones, so that a
// request stays far below etcd's request limit (1.5 MiB by default) even
// for a 1 MiB key.
//
// The names are injective and the directories prefix-free: the namespace
// ends at the first NUL, since P is printable ASCII and R has no NUL; P
// ends in '/' and R has none, so P R splits into P and R one way only;
// name(K) begins with a digit or '#' and its length fixes where K ends.
// A range read of a directory thus returns the entries of one lock only.
const maxRawKey = 256

type names struct {
	dir, entry string
}

func namespace(prefix, region string) string { return prefix + region + "\x00" }

func keyNames(ns, clientID, key string) names {
	var name string
	if len(key) <= maxRawKey {
		name = strconv.Itoa(len(key)) + ":" + key
	} else {
		sum := sha256.Sum256([]byte(key))
		name = "#" + hex.EncodeToString(sum[:])
	}
	dir := ns + name + "\x00"
	return names{dir: dir, entry: dir + clientID}
}
