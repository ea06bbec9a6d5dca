package jdbc

import (
	"crypto/md5"

	"github.com/google/uuid"
)

// UUIDKey maps a key to a LOCK_KEY the way Spring Integration's
// UUIDConverter does, so that lockreg and Spring applications agree on the
// row of a key: a key in the canonical UUID form
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits of either case) becomes
// the same UUID in lower case; any other key, including the empty one and
// keys that are not valid UTF-8, becomes the MD5 name-based (version 3) UUID
// of its bytes, as Java's UUID.nameUUIDFromBytes computes it: the MD5 of the
// bytes alone, without a namespace. So UUIDKey("foo") is
// "acbd18db-4cc2-385c-adef-654fccc4a4d8". It costs one MD5 of the key and
// allocates the 36-byte result.
func UUIDKey(key string) string {
	if isCanonicalUUID(key) {
		b := []byte(key)
		for i, c := range b {
			if 'A' <= c && c <= 'F' {
				b[i] = c + ('a' - 'A')
			}
		}
		return string(b)
	}
	sum := md5.Sum([]byte(key))
	sum[6] = sum[6]&0x0f | 0x30 // version 3
	sum[8] = sum[8]&0x3f | 0x80 // IETF variant
	return uuid.UUID(sum).String()
}

// isCanonicalUUID reports whether s matches Spring's UUID pattern
// ^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$.
func isCanonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
