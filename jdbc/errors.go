package jdbc

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/lockreg/lockreg/registry"
)

var (
	// ErrNoTable reports that the lock table does not exist. The returned
	// error wraps it, names the table (with its prefix) and says how to
	// create it.
	ErrNoTable = errors.New("jdbc: lock table missing")

	// ErrInvalidOption reports an invalid option value (or an invalid result
	// of the WithKeyMapping function). The returned error wraps it and names
	// the option.
	ErrInvalidOption = errors.New("jdbc: invalid option")

	// ErrUnknownDialect reports a database whose driver jdbc does not
	// recognise when no WithDialect option is given.
	ErrUnknownDialect = errors.New("jdbc: unknown dialect")

	// ErrClientFoundRows reports a MySQL database whose connections count
	// the rows a statement found rather than those it changed
	// (clientFoundRows=true in the go-sql-driver/mysql DSN), with which a
	// custom acquire query could not tell a lock taken from one held
	// elsewhere. The returned error wraps it and says what to change.
	ErrClientFoundRows = errors.New("jdbc: MySQL connections count found rows, not changed ones")
)

// sqlState is implemented by *pgconn.PgError (pgx) and *pq.Error (lib/pq).
type sqlState interface{ SQLState() string }

// sqliteCode is implemented by *sqlite.Error (modernc.org/sqlite).
type sqliteCode interface{ Code() int }

// sqliteResultCode returns the SQLite result code in err's chain, from
// modernc.org/sqlite's or mattn/go-sqlite3's error.
func sqliteResultCode(err error) (int, bool) {
	var lite sqliteCode
	if errors.As(err, &lite) {
		return lite.Code(), true
	}
	code := 0
	found := inChain(err, func(e error) bool {
		code = mattnCode(e)
		return code != 0
	})
	return code, found
}

// mattnCode returns the result code of a github.com/mattn/go-sqlite3 error,
// or 0. Its sqlite3.Error keeps the code in a field of a named int type,
// with no method to read it, and the main module must not import the cgo
// driver, so the field is read by reflection.
func mattnCode(err error) int {
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0
		}
		v = v.Elem()
	}
	if v.Type().PkgPath() != "github.com/mattn/go-sqlite3" {
		return 0
	}
	switch {
	case v.Kind() == reflect.Struct && v.Type().Name() == "Error": // sqlite3.Error
		if c := v.FieldByName("Code"); c.Kind() == reflect.Int {
			return int(c.Int())
		}
	case v.Kind() == reflect.Int: // sqlite3.ErrNo, sqlite3.ErrNoExtended
		return int(v.Int())
	}
	return 0
}

// inChain reports whether f holds for err or an error it wraps.
func inChain(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if inChain(e, f) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// isTransient reports whether err may go away on retry: serialization
// failures, deadlocks, lock-wait timeouts, busy databases and broken
// connections. It looks at error codes and types, never at messages.
func isTransient(err error) bool {
	var st sqlState
	if errors.As(err, &st) {
		switch code := st.SQLState(); code {
		case "40001", // serialization_failure
			"40P01", // deadlock_detected
			"55P03", // lock_not_available (lock_timeout, NOWAIT)
			"57014", // query_canceled (statement_timeout; a done ctx is handled before)
			"57P01", // admin_shutdown
			"57P02", // crash_shutdown
			"57P03", // cannot_connect_now
			"53300": // too_many_connections
			return true
		default:
			if strings.HasPrefix(code, "08") { // connection exception
				return true
			}
		}
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case 1205, // ER_LOCK_WAIT_TIMEOUT
			1213, // ER_LOCK_DEADLOCK
			1040, // ER_CON_COUNT_ERROR
			1053, // ER_SERVER_SHUTDOWN
			1927, // ER_CONNECTION_KILLED (MariaDB)
			4031: // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+)
			return true
		}
	}
	if code, ok := sqliteResultCode(err); ok {
		switch code & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED and their extended codes
			return true
		}
	}
	if errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var retry interface{ SafeToRetry() bool }
	return errors.As(err, &retry) && retry.SafeToRetry()
}

// isNoTable reports whether err says the table does not exist, by code.
// SQLite has no such code; see LockRepository.sqliteTableMissing.
func isNoTable(err error) bool {
	var st sqlState
	if errors.As(err, &st) && st.SQLState() == "42P01" { // undefined_table
		return true
	}
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == 1146 // ER_NO_SUCH_TABLE
}

// wrap gives a database error its context (what, as made by opKey) and
// classification: an error wrapping ctx.Err() when ctx is done, a transient
// error, an error wrapping ErrNoTable, or err as it is.
func (r *LockRepository) wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: %w: %w", what, ctxErr, err)
	}
	if isTransient(err) {
		return registry.Transient(fmt.Errorf("%s: %w", what, err))
	}
	if isNoTable(err) || r.sqliteTableMissing(ctx) {
		return fmt.Errorf("%s: %w", what, r.noTable(err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// opKey describes operation op on a caller's key for error messages.
func opKey(op, key string) string { return "jdbc: " + op + " " + quote(key) }

func (r *LockRepository) noTable(err error) error {
	table := "table " + r.cfg.table
	if r.queue != nil { // the statement may have missed either
		table += " or its waiter queue " + r.cfg.table + "_WAIT"
	}
	return fmt.Errorf("%w: %s does not exist; create it with jdbc.CreateSchema or the scripts in lockreg's sql/%s folder: %w",
		ErrNoTable, table, r.cfg.dialect, err)
}

// sqliteTableMissing reports whether the repository is on SQLite and its
// table does not exist: SQLite reports a missing table with a generic code,
// so the catalog is asked rather than the message read.
func (r *LockRepository) sqliteTableMissing(ctx context.Context) bool {
	return r.cfg.dialect == SQLite && sqliteTablesMissing(ctx, r.db, r.cfg.table)
}

// sqliteTablesMissing reports whether any of tables is missing from the
// SQLite database db, by its catalog.
func sqliteTablesMissing(ctx context.Context, db DB, tables ...string) bool {
	for _, t := range tables {
		var n int
		err := db.QueryRowContext(ctx,
			`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND lower(name) = lower(?)`, t).Scan(&n)
		if err == nil && n == 0 {
			return true
		}
	}
	return false
}

// maxQuotedKey bounds how much of a key error messages repeat.
const maxQuotedKey = 128

// quote quotes a caller's key or option value for an error message,
// shortening long ones.
func quote(s string) string {
	if len(s) <= maxQuotedKey {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:maxQuotedKey]) + "..." + "(" + strconv.Itoa(len(s)) + " bytes)"
}
