package scheduler

import (
	"fmt"
	"strings"
	"time"
)

// The table's times, as db-scheduler binds them: timestamptz on
// PostgreSQL (any instant), DATETIME(6) wall time in Config.TimeZone on
// MySQL/MariaDB, and on SQLite INTEGER epoch milliseconds, what Java's
// sqlite-jdbc stores for setTimestamp by default. Statements read the
// database's clock through the @now expressions here, so that every
// liveness judgement is the database's.

// nowSQL returns the dialect's expression of the database's current time
// in the table's representation. On MySQL with a zone other than UTC it
// takes the parameter :tz, the zone's offset now.
func (s *settled) nowSQL() string {
	switch s.d.Name {
	case "postgres":
		return `now()`
	case "mysql":
		if s.loc == time.UTC {
			return `UTC_TIMESTAMP(6)`
		}
		return `CONVERT_TZ(UTC_TIMESTAMP(6), '+00:00', :tz)`
	default:
		return `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`
	}
}

// shiftSQL returns nowSQL plus (sign "+") or minus ("-") the microseconds
// of parameter p.
func (s *settled) shiftSQL(sign, p string) string {
	switch s.d.Name {
	case "postgres":
		return `(now() ` + sign + ` CAST(:` + p + ` AS BIGINT) * INTERVAL '1 microsecond')`
	case "mysql":
		return `(` + s.nowSQL() + ` ` + sign + ` INTERVAL :` + p + ` MICROSECOND)`
	default:
		return `(` + s.nowSQL() + ` ` + sign + ` CAST(:` + p + ` AS INTEGER) / 1000)`
	}
}

// expand replaces {t} with the table, @now with nowSQL and @now+:p,
// @now-:p with shiftSQL in a statement template, before dialect.Compile.
func (s *settled) expand(q string) string {
	var b strings.Builder
	for {
		i := strings.IndexAny(q, "{@")
		if i < 0 {
			b.WriteString(q)
			return b.String()
		}
		b.WriteString(q[:i])
		q = q[i:]
		switch {
		case strings.HasPrefix(q, "{t}"):
			b.WriteString(s.Table)
			q = q[3:]
		case strings.HasPrefix(q, "@now+:") || strings.HasPrefix(q, "@now-:"):
			n := 6
			for n < len(q) && (q[n] == '_' || 'a' <= q[n] && q[n] <= 'z') {
				n++
			}
			b.WriteString(s.shiftSQL(q[4:5], q[6:n]))
			q = q[n:]
		case strings.HasPrefix(q, "@now"):
			b.WriteString(s.nowSQL())
			q = q[4:]
		default:
			b.WriteString(q[:1])
			q = q[1:]
		}
	}
}

// bindTime converts an instant to a parameter of the table's time columns.
func (s *settled) bindTime(t time.Time) any {
	switch s.d.Name {
	case "postgres":
		return t.UTC()
	case "mysql":
		// Text, so that the driver does not convert it to its own loc.
		return t.In(s.loc).Format("2006-01-02 15:04:05.999999")
	default:
		return t.UnixMilli()
	}
}

// tzOffset is the :tz parameter: Config.TimeZone's offset now, as MySQL's
// CONVERT_TZ reads it without the server's zone tables.
func (s *settled) tzOffset() string {
	_, off := time.Now().In(s.loc).Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("%c%02d:%02d", sign, off/3600, off%3600/60)
}

// readTime converts a scanned time column; NULL is the zero time.
func (s *settled) readTime(v any) (time.Time, error) {
	switch t := v.(type) {
	case nil:
		return time.Time{}, nil
	case int64:
		return time.UnixMilli(t), nil
	case float64:
		return time.UnixMilli(int64(t)), nil
	case time.Time:
		if s.d.Name == "mysql" { // wall time in the configured zone, whatever loc the driver gave it
			return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), s.loc), nil
		}
		return t, nil
	case []byte:
		return s.parseTime(string(t))
	case string:
		return s.parseTime(t)
	}
	return time.Time{}, fmt.Errorf("unexpected time value %T", v)
}

func (s *settled) parseTime(text string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00"} {
		if t, err := time.ParseInLocation(layout, text, s.loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("unexpected time %q", text)
}
