package dbscheduler

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockreg/lockreg/jdbc"
)

// Execution is a row of the table as Java's ExecutionResultSetMapper reads
// it (select *), and, for one that Poll picked, how its run ended.
type Execution struct {
	Task, Instance string
	Data           []byte
	// Time is execution_time; LastSuccess, LastFailure and LastHeartbeat
	// are zero when NULL. All are read as Java's getInstant reads them.
	Time, LastSuccess, LastFailure, LastHeartbeat time.Time
	Picked                                        bool
	PickedBy                                      string
	ConsecutiveFailures                           int
	// Version is the row's version; for an execution Poll picked, the
	// version of its pick.
	Version int64

	// Err is the handler's error, after which Poll wrote the failure
	// (S9); nil after a success (S8).
	Err error
	// Completion is why the completion was not written: ErrNotCompleted
	// when it matched no row, a database error otherwise; nil when it was
	// written.
	Completion error
}

// key identifies an execution among the running ones.
func (e *Execution) key() string { return e.Task + "\x00" + e.Instance }

// String is the execution as Java's Execution.toString names it.
func (e *Execution) String() string {
	return fmt.Sprintf("%s/%s version %d", e.Task, e.Instance, e.Version)
}

// scan reads the current row of a select * statement.
func (n *Node) scan(rows *sql.Rows) (*Execution, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	vals := make([]any, len(cols))
	for i := range vals {
		vals[i] = new(any)
	}
	if err := rows.Scan(vals...); err != nil {
		return nil, err
	}
	e := &Execution{}
	for i, col := range cols {
		v := *(vals[i].(*any))
		switch strings.ToLower(col) {
		case "task_name":
			e.Task = text(v)
		case "task_instance":
			e.Instance = text(v)
		case "task_data":
			if v != nil {
				e.Data = []byte(text(v))
			}
		case "execution_time":
			e.Time, err = n.instant(v)
		case "last_success":
			e.LastSuccess, err = n.instant(v)
		case "last_failure":
			e.LastFailure, err = n.instant(v)
		case "last_heartbeat":
			e.LastHeartbeat, err = n.instant(v)
		case "picked":
			var p int64
			p, err = integer(v)
			e.Picked = p != 0
		case "picked_by":
			e.PickedBy = text(v)
		case "consecutive_failures":
			var c int64
			c, err = integer(v)
			e.ConsecutiveFailures = int(c)
		case "version":
			e.Version, err = integer(v)
		}
		if err != nil {
			return nil, fmt.Errorf("dbscheduler: column %s: %w", col, err)
		}
	}
	return e, nil
}

// instant reads a time column as Java's getInstant does: a timestamptz on
// PostgreSQL, a wall time in the JVM's zone on MySQL/MariaDB, epoch
// milliseconds on SQLite.
func (n *Node) instant(v any) (time.Time, error) {
	switch v := v.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		if n.Dialect == jdbc.MySQL { // parseTime=true reads the wall time as UTC
			return time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), n.zone()), nil
		}
		return v, nil
	case int64:
		return time.UnixMilli(v), nil
	case float64:
		return time.UnixMilli(int64(v)), nil
	}
	s := text(v)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	return time.ParseInLocation("2006-01-02 15:04:05.999999999", s, n.zone())
}

// text is a string or bytes column's value.
func text(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case []byte:
		return string(v)
	case string:
		return v
	}
	return fmt.Sprint(v)
}

// integer is an integer or boolean column's value, 0 when NULL.
func integer(v any) (int64, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case int64:
		return v, nil
	case bool:
		if v {
			return 1, nil
		}
		return 0, nil
	case float64:
		return int64(v), nil
	}
	s := text(v)
	switch s {
	case "true":
		return 1, nil
	case "false":
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
