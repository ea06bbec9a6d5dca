package scheduler

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// ErrUnknownTask reports a task name the client does not know (when
	// Config.Tasks is set).
	ErrUnknownTask = errors.New("scheduler: unknown task")
	// ErrInvalidInstance reports an empty or too long task name or instance
	// id, or one that is not valid UTF-8 or holds NUL.
	ErrInvalidInstance = errors.New("scheduler: invalid task instance")
	// ErrData reports data that does not encode as JSON, or an execution's
	// data that does not decode.
	ErrData = errors.New("scheduler: task data")
	// ErrExists reports that Schedule found the execution scheduled
	// already; nothing was written.
	ErrExists = errors.New("scheduler: execution exists")
	// ErrNotFound reports that the execution does not exist.
	ErrNotFound = errors.New("scheduler: execution not found")
	// ErrPicked reports that the execution is picked (running, or held by
	// a scheduler), so that Reschedule and Cancel must not touch it, as
	// db-scheduler's TaskInstanceCurrentlyExecutingException.
	ErrPicked = errors.New("scheduler: execution is picked")
	// ErrPanic wraps the value of a panicking handler, as the Failure's Err.
	ErrPanic = errors.New("scheduler: handler panicked")
)

// Instance names an execution to schedule: a task and an instance id
// unique within it, with its data.
type Instance struct {
	Task string // Required: the task's name
	ID   string // Required: the instance id, unique per task
	// Data is stored as JSON (a json.RawMessage as it is). Optional: nil is
	// stored as the JSON null, never SQL NULL, which Java's Gson serializer
	// cannot read.
	Data any
	// Priority is written when Config.Priority is on. Optional: 0 means
	// the task's priority, or PriorityMedium when the client does not know
	// the task.
	Priority int
}

// Execution is one row of the table: a scheduled, running or failing
// execution of a task.
type Execution struct {
	Task     string
	Instance string
	// Data is task_data as stored: JSON when Go or Java's Gson/Jackson
	// serializers wrote it; other bytes (Java serialization) are passed
	// through untouched.
	Data []byte
	// Time is when the execution is due (execution_time).
	Time time.Time
	// Picked and PickedBy say whether a scheduler holds it, and which.
	Picked   bool
	PickedBy string
	// LastSuccess, LastFailure and LastHeartbeat are zero when NULL.
	LastSuccess, LastFailure, LastHeartbeat time.Time
	// ConsecutiveFailures counts the failures since the last success.
	ConsecutiveFailures int
	// Version increases by one at every transition of the row. The version
	// an execution has while a scheduler runs it is its fencing token: it
	// increases across picks, so storage that records the highest token
	// seen can refuse a revived zombie's writes.
	Version int64
	// Priority is 0 when NULL.
	Priority int

	stored bool // its task is RecurringStored: Data is a StoredSchedule
}

// Decode decodes the execution's JSON data into v, as json.Unmarshal
// does. For a RecurringStored task it decodes the StoredSchedule's Data.
// Errors wrap ErrData.
func (e *Execution) Decode(v any) error {
	data := e.Data
	if e.stored {
		var st StoredSchedule
		if err := json.Unmarshal(e.Data, &st); err != nil {
			return fmt.Errorf("%w: %s/%s: %w", ErrData, e.Task, e.Instance, err)
		}
		data = st.Data
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s/%s: %w", ErrData, e.Task, e.Instance, err)
	}
	return nil
}

// StoredSchedule is the data of a RecurringStored task's execution: its
// schedule and its own data.
type StoredSchedule struct {
	// Schedule is a schedule in Parse's form, or a cron expression.
	Schedule string `json:"schedule"`
	// Zone is the cron expression's zone; empty is UTC.
	Zone string `json:"zone,omitempty"`
	// Data is the execution's own data.
	Data json.RawMessage `json:"data,omitempty"`
}

// schedule returns the stored schedule.
func (st StoredSchedule) schedule() (Schedule, error) {
	s := st.Schedule
	if s == "-" || strings.HasPrefix(s, "FIXED_DELAY|") || strings.HasPrefix(s, "DAILY|") {
		return Parse(s)
	}
	loc := time.UTC
	if st.Zone != "" {
		var err error
		if loc, err = time.LoadLocation(st.Zone); err != nil {
			return nil, fmt.Errorf("%w: zone %q: %w", ErrInvalidSchedule, st.Zone, err)
		}
	}
	return Cron(s, loc)
}

// storedOf returns the StoredSchedule of s and data.
func storedOf(s Schedule, data any) (StoredSchedule, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return StoredSchedule{}, fmt.Errorf("%w: %w", ErrData, err)
	}
	st := StoredSchedule{Schedule: s.String(), Data: b}
	if c, ok := s.(cronSchedule); ok && c.loc != time.UTC {
		st.Zone = c.loc.String()
	}
	if _, err := st.schedule(); err != nil {
		return StoredSchedule{}, err
	}
	return st, nil
}

func (e *Execution) storedSchedule() (Schedule, error) {
	var st StoredSchedule
	if err := json.Unmarshal(e.Data, &st); err != nil || st.Schedule == "" {
		return nil, fmt.Errorf("%w: %s/%s: no stored schedule in its data", ErrData, e.Task, e.Instance)
	}
	return st.schedule()
}

// checkID validates a task name or instance id.
func checkID(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidInstance, what)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidInstance, what, s)
	case utf8.RuneCountInString(s) > MaxIDLen:
		return fmt.Errorf("%w: %s %.40q... is longer than %d characters", ErrInvalidInstance, what, s, MaxIDLen)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s %q contains NUL", ErrInvalidInstance, what, s)
	}
	return nil
}

// columns are the table's columns in the order scan reads them.
const columns = `task_name, task_instance, task_data, execution_time, picked, picked_by, last_success, last_failure, ` +
	`consecutive_failures, last_heartbeat, version, priority`

// scan reads one row of columns.
func (s *settled) scan(rows interface{ Scan(...any) error }) (*Execution, error) {
	var (
		e                Execution
		at, ok, fail, hb any
		picked           any
		pickedBy         sql.NullString
		failures, prio   sql.NullInt64
	)
	if err := rows.Scan(&e.Task, &e.Instance, &e.Data, &at, &picked, &pickedBy, &ok, &fail, &failures, &hb, &e.Version, &prio); err != nil {
		return nil, err
	}
	var err error
	for _, f := range []struct {
		v   any
		dst *time.Time
	}{{at, &e.Time}, {ok, &e.LastSuccess}, {fail, &e.LastFailure}, {hb, &e.LastHeartbeat}} {
		if *f.dst, err = s.readTime(f.v); err != nil {
			return nil, fmt.Errorf("scheduler: %s/%s: %w", e.Task, e.Instance, err)
		}
	}
	if e.Picked, err = readBool(picked); err != nil {
		return nil, fmt.Errorf("scheduler: %s/%s: picked: %w", e.Task, e.Instance, err)
	}
	e.PickedBy, e.ConsecutiveFailures, e.Priority = pickedBy.String, int(failures.Int64), int(prio.Int64)
	if t := s.tasks[e.Task]; t != nil {
		e.stored = t.stored
	}
	return &e, nil
}

func readBool(v any) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case int64:
		return b != 0, nil
	case []byte:
		return len(b) > 0 && b[0] != '0' && b[0] != 0, nil
	case string:
		return b != "" && b != "0" && b != "false", nil
	case nil:
		return false, nil
	}
	return false, fmt.Errorf("unexpected boolean %T", v)
}
