package dialect

import (
	"database/sql"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The limits of the schema's columns and of the table prefix, which is
// pasted into SQL.
const (
	MaxPrefixLen   = 40
	MaxRegionLen   = 100 // REGION VARCHAR(100)
	MaxClientIDLen = 36  // CLIENT_ID CHAR(36)
	MaxLockKeyLen  = 36  // LOCK_KEY CHAR(36)
	MaxNameLen     = 255 // LOCK_NAME and HOLDER VARCHAR(255), in characters
)

// Readable returns s as a LOCK_NAME or HOLDER value: valid UTF-8 (invalid
// bytes become U+FFFD) without NUL bytes, cut to MaxNameLen characters.
// It allocates only when it changes s.
func Readable(s string) string {
	if len(s) <= MaxNameLen && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s // the common case: nothing to change
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if utf8.RuneCountInString(s) > MaxNameLen {
		n := 0
		for i := range s {
			if n == MaxNameLen {
				return s[:i]
			}
			n++
		}
	}
	return s
}

var prefixPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckPrefix returns why p cannot be a table prefix, or "".
func CheckPrefix(p string) string {
	if !prefixPattern.MatchString(p) || len(p) > MaxPrefixLen {
		return fmt.Sprintf("a prefix must match %s and be at most %d bytes long", prefixPattern, MaxPrefixLen)
	}
	return ""
}

// CheckText returns why s cannot be a region or client id of at most max
// bytes, or "".
func CheckText(s string, max int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > max:
		return fmt.Sprintf("must be at most %d bytes long, not %d", max, len(s))
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "must not contain NUL bytes"
	}
	return ""
}

// Micros converts a duration to whole microseconds, the unit of the
// statements' durations, rounding up.
func Micros(d time.Duration) int64 {
	m := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		m++
	}
	return m
}

// maxQuoted bounds how much of a key error messages repeat.
const maxQuoted = 128

// Quote quotes a caller's key or option value for an error message,
// shortening long ones.
func Quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:maxQuoted]) + "..." + "(" + strconv.Itoa(len(s)) + " bytes)"
}

// IsNil reports whether db is nil, a typed nil, or a pointer to a struct
// that embeds a nil *sql.DB (an *sqlx.DB without its *sql.DB).
func IsNil(db any) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return true
		}
		if e := v.Elem(); e.Kind() == reflect.Struct {
			for i := range e.NumField() {
				f := e.Field(i)
				if e.Type().Field(i).Anonymous && f.Type() == reflect.TypeFor[*sql.DB]() && f.IsNil() {
					return true
				}
			}
		}
	case reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}
