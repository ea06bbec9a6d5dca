package dbscheduler

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockreg/lockreg/jdbc"
)

// Node is one Java db-scheduler instance on a table: its settings, by
// SchedulerBuilder's names, and what the JVM keeps in memory (the
// unresolved names, the executions running). Set the fields before the
// first call and do not change them; the methods are safe for concurrent
// use.
type Node struct {
	// Dialect is the database's: jdbc.Postgres, jdbc.MySQL (MariaDB too)
	// or jdbc.SQLite.
	Dialect jdbc.Dialect
	// DB is the pool, Java's DataSource.
	DB *sql.DB
	// Table is tableName. Optional: "scheduled_tasks".
	Table string
	// Name is schedulerName, written to picked_by (truncated to 50
	// characters, as Java does).
	Name string
	// Zone is the JVM's default zone, in which MySQL/MariaDB timestamps
	// are bound and read. Optional: UTC, as with
	// alwaysPersistTimestampInUTC().
	Zone *time.Location
	// LockAndFetch selects the LOCK_AND_FETCH polling strategy (S5,
	// PostgreSQL only) rather than FETCH (S3, S4, S1).
	LockAndFetch bool
	// Tasks are the names of the node's known tasks. Optional: nil
	// resolves every name (a node that knows every task in the table).
	Tasks []string
	// Threads run the executions one Poll picked. Optional: 1.
	Threads int
	// Limit is the most executions one Poll fetches. Optional: 30,
	// db-scheduler's upper limit (3.0) times its default 10 threads.
	Limit int
	// HeartbeatInterval is heartbeatInterval. Optional: 5 min.
	HeartbeatInterval time.Duration
	// MissedHeartbeats is missedHeartbeatsLimit: a picked execution whose
	// heartbeat is older than MissedHeartbeats × HeartbeatInterval by the
	// host's clock is dead. Optional: 6.
	MissedHeartbeats int
	// DeleteUnresolvedAfter is deleteUnresolvedAfter. Optional: 14 days.
	DeleteUnresolvedAfter time.Duration
	// RetryDelay is the one-time task's OnFailureRetryLater delay.
	// Optional: 5 min.
	RetryDelay time.Duration
	// Clock is the JVM's clock, Java's clock setting. Optional: time.Now.
	Clock func() time.Time

	mu         sync.Mutex
	unresolved map[string]time.Time  // name -> execution_time of the first row seen
	running    map[string]*Execution // currentlyExecuting, by task and instance
	known      map[string]bool       // Tasks, once
	rewritten  map[string]string     // statements with the dialect's placeholders
}

// ErrNotCompleted is the completion error of an execution whose S8 or S9
// matched no row: another node revived or took it meanwhile. Java throws
// an ExecutionException ("... Indicates a bug.") and logs "Failed while
// completing execution".
var ErrNotCompleted = errors.New("dbscheduler: the completion matched no row (Java: \"Indicates a bug.\")")

func (n *Node) table() string {
	if n.Table == "" {
		return "scheduled_tasks"
	}
	return n.Table
}

func (n *Node) pickedBy() string {
	if len(n.Name) > 50 {
		return n.Name[:50]
	}
	return n.Name
}

func (n *Node) threads() int { return max(n.Threads, 1) }

func (n *Node) limit() int {
	if n.Limit <= 0 {
		return 30
	}
	return n.Limit
}

func (n *Node) deadAfter() time.Duration {
	hb, missed := n.HeartbeatInterval, n.MissedHeartbeats
	if hb <= 0 {
		hb = 5 * time.Minute
	}
	if missed <= 0 {
		missed = 6
	}
	return time.Duration(missed) * hb
}

func (n *Node) deleteUnresolvedAfter() time.Duration {
	if n.DeleteUnresolvedAfter <= 0 {
		return 14 * 24 * time.Hour
	}
	return n.DeleteUnresolvedAfter
}

func (n *Node) retryDelay() time.Duration {
	if n.RetryDelay <= 0 {
		return 5 * time.Minute
	}
	return n.RetryDelay
}

func (n *Node) now() time.Time {
	if n.Clock == nil {
		return time.Now()
	}
	return n.Clock()
}

func (n *Node) zone() *time.Location {
	if n.Zone == nil {
		return time.UTC
	}
	return n.Zone
}

// ts binds instant t as Java's JdbcCustomization.setInstant does.
func (n *Node) ts(t time.Time) any {
	t = t.Truncate(time.Microsecond)
	switch n.Dialect {
	case jdbc.Postgres:
		return t.UTC()
	case jdbc.MySQL:
		return t.In(n.zone()).Format("2006-01-02 15:04:05.999999")
	}
	return t.UnixMilli()
}

// nullTS is ts of a nullable instant: SQL NULL for the zero time.
func (n *Node) nullTS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return n.ts(t)
}

// q rewrites a statement written with ? placeholders for the dialect.
func (n *Node) q(query string) string {
	if n.Dialect != jdbc.Postgres {
		return query
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.rewritten[query]; ok {
		return s
	}
	if n.rewritten == nil {
		n.rewritten = map[string]string{}
	}
	n.rewritten[query] = Dollars(query)
	return n.rewritten[query]
}

// Dollars numbers the ? placeholders of query as PostgreSQL's $1, $2, ...;
// db-scheduler's statements have no ? in literals.
func Dollars(query string) string {
	var b strings.Builder
	i := 0
	for _, c := range query {
		if c == '?' {
			i++
			b.WriteString("$" + strconv.Itoa(i))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// exec runs a statement and returns the rows it affected.
func (n *Node) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := n.DB.ExecContext(ctx, n.q(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs a select * statement and maps its rows as Java's
// ExecutionResultSetMapper(includeUnresolved, addUnresolvedToExclusionFilter)
// does: a row of a name the node does not know blacklists the name (when
// blacklist is set) and is left out (unless includeUnresolved).
func (n *Node) query(ctx context.Context, includeUnresolved, blacklist bool, query string, args ...any) ([]*Execution, error) {
	rows, err := n.DB.QueryContext(ctx, n.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var es []*Execution
	for rows.Next() {
		e, err := n.scan(rows)
		if err != nil {
			return nil, err
		}
		if !n.resolve(e, blacklist) && !includeUnresolved {
			continue
		}
		es = append(es, e)
	}
	return es, rows.Err()
}

// resolve is TaskResolver.resolve: whether the node knows e's task; an
// unknown name is blacklisted when blacklist is set.
func (n *Node) resolve(e *Execution, blacklist bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.Tasks == nil {
		return true
	}
	if n.known == nil {
		n.known = map[string]bool{}
		for _, t := range n.Tasks {
			n.known[t] = true
		}
	}
	if n.known[e.Task] {
		return true
	}
	if blacklist {
		if n.unresolved == nil {
			n.unresolved = map[string]time.Time{}
		}
		if _, ok := n.unresolved[e.Task]; !ok {
			n.unresolved[e.Task] = e.Time
		}
	}
	return false
}

// Unresolved lists the names on the node's blacklist.
func (n *Node) Unresolved() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.unresolved))
	for name := range n.unresolved {
		names = append(names, name)
	}
	return names
}

// unresolvedFilter is UnresolvedFilter: its "and task_name not in (...)"
// and its parameters, "" when no name is blacklisted.
func (n *Node) unresolvedFilter() (string, []any) {
	names := n.Unresolved()
	if len(names) == 0 {
		return "", nil
	}
	args := make([]any, len(names))
	for i, name := range names {
		args[i] = name
	}
	return " and task_name not in (" + strings.TrimSuffix(strings.Repeat("?,", len(names)), ",") + ")", args
}

// Schedule is SchedulerClient.scheduleIfNotExists (createIfNotExists): S1
// and, when no execution of task and instance exists, S2 with picked
// false and version 1; after a failed S2 (a duplicate key, say) S1 again.
// It reports whether it inserted the execution.
func (n *Node) Schedule(ctx context.Context, task, instance string, data []byte, at time.Time) (bool, error) {
	if e, err := n.get(ctx, task, instance); err != nil || e != nil {
		return false, err
	}
	_, err := n.exec(ctx, `insert into `+n.table()+`(task_name, task_instance, task_data, execution_time, picked, version) values(?, ?, ?, ?, ?, ?)`,
		task, instance, data, n.ts(at), false, int64(1))
	if err == nil {
		return true, nil
	}
	e, gerr := n.get(ctx, task, instance)
	if gerr != nil || e == nil {
		return false, errors.Join(err, gerr)
	}
	return false, nil // "another thread created it"
}

// get is S1 (getExecution): the execution of task and instance, nil when
// there is none.
func (n *Node) get(ctx context.Context, task, instance string) (*Execution, error) {
	es, err := n.query(ctx, true, false, `select * from `+n.table()+` where task_name = ? and task_instance = ?`, task, instance)
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return es[0], nil
}
