package clustertest

import (
	"database/sql"
	"testing"

	"github.com/lockreg/lockreg/internal/testdb"
)

// requirePostgres opens PostgreSQL through pgx with lockreg's tables (see
// testdb.Postgres) on a small pool, closed when t ends: the work runs in the
// child processes, which open the returned DSN.
func requirePostgres(t testing.TB) (db *sql.DB, dsn string) {
	t.Helper()
	pg := testdb.Postgres(t)
	pg.DB.SetMaxOpenConns(4)
	pg.DB.SetMaxIdleConns(4)
	return pg.DB, pg.DSN
}
