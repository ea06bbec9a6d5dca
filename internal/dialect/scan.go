package dialect

import (
	"database/sql"
	"fmt"
	"time"
)

// ScanTime converts a scanned time column: time.Time from PostgreSQL and
// from MySQL with parseTime=true, text otherwise (SQLite's tables and
// MySQL without parseTime); NULL is the zero time. Times are UTC wall time.
func ScanTime(v any) (time.Time, error) {
	var s string
	switch t := v.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC), nil
	case string:
		s = t
	case []byte:
		s = string(t)
	default:
		return time.Time{}, fmt.Errorf("unexpected time value %T", v)
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("unexpected time %q", s)
}

// Strings returns the one text column of every row of rows, the result of
// a query that failed with err unless err is nil; it closes rows.
func Strings(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Count returns the rows affected by an Exec that returned res and err.
func Count(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
