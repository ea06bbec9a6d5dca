package dialect

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"syscall"
)

// The drivers' errors are told apart by SQLSTATE and error codes, never by
// their messages, and without importing a driver: pgx's *pgconn.PgError and
// lib/pq's *pq.Error have a SQLState method, modernc.org/sqlite's *Error a
// Code method; go-sql-driver/mysql's *MySQLError (field Number) and
// mattn/go-sqlite3's Error (field Code) are read by reflection on the
// package path of their type. go-sql-driver/mysql's ErrInvalidConn, an
// errors.New value without a type of its own, is the one error recognised
// by its text (see invalidConn).

type sqlState interface{ SQLState() string }

// SQLState returns the SQLSTATE of the PostgreSQL error in err's chain, or "".
func SQLState(err error) string {
	var st sqlState
	if errors.As(err, &st) {
		return st.SQLState()
	}
	return ""
}

// mysqlNumber returns the error number of the go-sql-driver/mysql
// *MySQLError in err's chain, or 0.
func mysqlNumber(err error) int {
	n := 0
	inChain(err, func(e error) bool {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Pointer || v.IsNil() {
			return false
		}
		v = v.Elem()
		if v.Kind() != reflect.Struct || v.Type().PkgPath() != "github.com/go-sql-driver/mysql" || v.Type().Name() != "MySQLError" {
			return false
		}
		if f := v.FieldByName("Number"); f.Kind() == reflect.Uint16 {
			n = int(f.Uint())
		}
		return n != 0
	})
	return n
}

// sqliteResultCode returns the SQLite result code in err's chain, from
// modernc.org/sqlite's or mattn/go-sqlite3's error.
func sqliteResultCode(err error) (int, bool) {
	var lite interface{ Code() int }
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
// with no method to read it.
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

// invalidConn reports go-sql-driver/mysql's ErrInvalidConn, which the
// driver returns when the connection broke in the middle of a statement
// (it returns driver.ErrBadConn only when nothing was sent). It is
// errors.New("invalid connection"): its type is the errors package's, so
// it is recognised as an error of that type with exactly that text.
func invalidConn(err error) bool {
	return inChain(err, func(e error) bool {
		t := reflect.TypeOf(e)
		return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "errors" && e.Error() == "invalid connection"
	})
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

// IsTransient reports whether err may go away on retry: serialization
// failures, deadlocks, lock-wait timeouts, busy databases and broken
// connections.
func IsTransient(err error) bool {
	switch code := SQLState(err); code {
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
	switch mysqlNumber(err) {
	case 1205, // ER_LOCK_WAIT_TIMEOUT
		1213, // ER_LOCK_DEADLOCK
		1040, // ER_CON_COUNT_ERROR
		1053, // ER_SERVER_SHUTDOWN
		1927, // ER_CONNECTION_KILLED (MariaDB)
		4031: // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+)
		return true
	}
	if code, ok := sqliteResultCode(err); ok {
		switch code & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED and their extended codes
			return true
		}
	}
	if invalidConn(err) ||
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

// IsUndefinedColumn reports PostgreSQL's undefined_column and MySQL's
// ER_BAD_FIELD_ERROR, by code.
func IsUndefinedColumn(err error) bool {
	return SQLState(err) == "42703" || mysqlNumber(err) == 1054
}

// IsPreparedStatementLost reports the PostgreSQL errors that a pooler in
// transaction mode gives prepared statements, which live on the server
// connection they were prepared on: invalid_sql_statement_name (missing on
// this connection) and duplicate_prepared_statement (another client's is
// there).
func IsPreparedStatementLost(err error) bool {
	st := SQLState(err)
	return st == "26000" || st == "42P05"
}

// IsNoTable reports whether err, from a statement on tables, says that a
// table does not exist: by code (undefined_table, ER_NO_SUCH_TABLE), and
// where the dialect has no such code (SQLite) by asking the catalog
// whether one of tables is missing, with q.
func (d *Dialect) IsNoTable(ctx context.Context, q Querier, err error, tables ...string) bool {
	if SQLState(err) == "42P01" || mysqlNumber(err) == 1146 {
		return true
	}
	if d.tableColumns == nil || err == nil {
		return false
	}
	for _, t := range tables {
		if cols, cerr := d.tableColumns(ctx, q, t); cerr == nil && len(cols) == 0 {
			return true
		}
	}
	return false
}
