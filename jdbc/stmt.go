package jdbc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
)

// stmt is a lazily prepared statement. The first call prepares it; calls
// made while it is being prepared, after preparing failed, or after close
// execute the SQL unprepared instead, and the next call tries to prepare it
// again. No mutex is held across a database call: close marks the statement
// closed, and whoever stops using it last closes the *sql.Stmt. With
// unprepared set (WithoutPreparedStatements) it is never prepared.
type stmt struct {
	q          dialect.Query
	unprepared bool
	tel        *stmtTel // records durations; nil without instruments
	// direct, when not nil, runs scans whose context can end on the
	// driver connection (scanDirect); see directPool.
	direct connDB

	mu        sync.Mutex
	st        *sql.Stmt
	users     int  // callers executing st
	preparing bool // a caller is preparing st
	closed    bool
}

// exec executes the statement with args: one round trip once prepared on the
// connection database/sql picks.
func (s *stmt) exec(ctx context.Context, db DB, args []any) (_ sql.Result, err error) {
	if s.tel != nil {
		defer func(start time.Time) { s.tel.record(ctx, start, err) }(time.Now())
	}
	st := s.get(ctx, db)
	if st == nil {
		res, err := db.ExecContext(ctx, s.q.SQL, args...)
		return res, pooled(err)
	}
	defer s.put()
	res, err := st.ExecContext(ctx, args...)
	return res, pooled(err)
}

// scan executes the statement, a query of at most one row, and scans that
// row into dest. It reports false, with a nil error, when there is no row.
func (s *stmt) scan(ctx context.Context, db DB, args []any, dest ...any) (_ bool, err error) {
	if s.tel != nil {
		defer func(start time.Time) { s.tel.record(ctx, start, err) }(time.Now())
	}
	if s.direct != nil && ctx.Done() != nil {
		if ints, ok := int64Dests(dest); ok {
			found, err := scanDirect(ctx, s.direct, s.q.SQL, args, ints)
			return found, pooled(err)
		}
	}
	var row *sql.Row
	if st := s.get(ctx, db); st == nil {
		row = db.QueryRowContext(ctx, s.q.SQL, args...)
	} else {
		defer s.put()
		row = st.QueryRowContext(ctx, args...)
	}
	switch err := row.Scan(dest...); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, pooled(err)
	}
	return true, nil
}

// query executes the statement, a query, and calls each with every row.
func (s *stmt) query(ctx context.Context, db DB, args []any, each func(*sql.Rows) error) (err error) {
	if s.tel != nil {
		defer func(start time.Time) { s.tel.record(ctx, start, err) }(time.Now())
	}
	var rs *sql.Rows
	if st := s.get(ctx, db); st == nil {
		rs, err = db.QueryContext(ctx, s.q.SQL, args...)
	} else {
		defer s.put()
		rs, err = st.QueryContext(ctx, args...)
	}
	if err != nil {
		return pooled(err)
	}
	defer rs.Close()
	for rs.Next() {
		if err := each(rs); err != nil {
			return err
		}
	}
	return pooled(rs.Err())
}

// int64Dests returns dest as *int64s, if all of them are.
func int64Dests(dest []any) ([]*int64, bool) {
	ints := make([]*int64, len(dest))
	for i, d := range dest {
		p, ok := d.(*int64)
		if !ok {
			return nil, false
		}
		ints[i] = p
	}
	return ints, true
}

// get returns the prepared statement, registered as in use, or nil.
func (s *stmt) get(ctx context.Context, db DB) *sql.Stmt {
	s.mu.Lock()
	if s.closed || s.preparing || s.unprepared {
		s.mu.Unlock()
		return nil
	}
	if s.st != nil {
		s.users++
		s.mu.Unlock()
		return s.st
	}
	s.preparing = true
	s.mu.Unlock()

	// A failure here (a missing table, a dropped connection, a driver
	// that cannot prepare) is reported by the unprepared execution.
	st, err := db.PrepareContext(ctx, s.q.SQL)

	s.mu.Lock()
	s.preparing = false
	if err != nil || s.closed {
		s.mu.Unlock()
		if st != nil {
			st.Close()
		}
		return nil
	}
	s.st = st
	s.users++
	s.mu.Unlock()
	return st
}

// put ends a use that get began.
func (s *stmt) put() {
	s.mu.Lock()
	s.users--
	var st *sql.Stmt
	if s.closed && s.users == 0 {
		st, s.st = s.st, nil
	}
	s.mu.Unlock()
	if st != nil {
		st.Close()
	}
}

// close stops preparing and closes the prepared statement once unused.
func (s *stmt) close() {
	s.mu.Lock()
	s.closed = true
	var st *sql.Stmt
	if s.users == 0 {
		st, s.st = s.st, nil
	}
	s.mu.Unlock()
	if st != nil {
		st.Close()
	}
}

// pooled explains the PostgreSQL errors that a pooler in transaction mode
// gives prepared statements, which live on the server connection they were
// prepared on: invalid_sql_statement_name (missing on this connection) and
// duplicate_prepared_statement (another client's is there). The driver's
// own unnamed statements meet the same fate.
func pooled(err error) error {
	if !dialect.IsPreparedStatementLost(err) {
		return err
	}
	return fmt.Errorf("prepared statement missing or already defined on the server connection; behind a pooler "+
		"in transaction mode, such as PgBouncer's, use jdbc.WithoutPreparedStatements and keep the driver from "+
		"preparing (pgx: default_query_exec_mode=exec; lib/pq: binary_parameters=yes): %w", err)
}
