package clustertest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
)

// The PostgreSQL server the tests use, as in package jdbc's tests.
const (
	postgresEnv        = "LOCKREG_POSTGRES_DSN"
	postgresDefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// postgresDSN returns the DSN of the test server.
func postgresDSN() string {
	if v := os.Getenv(postgresEnv); v != "" {
		return v
	}
	return postgresDefaultDSN
}

// requirePostgres opens a small pool on the test server (pgx/v5 stdlib),
// closed when t ends, and creates lockreg's tables there. When the server
// cannot be reached it fails t if CI=true and skips t otherwise.
func requirePostgres(t testing.TB) (db *sql.DB, dsn string) {
	t.Helper()
	dsn = postgresDSN()
	if err := ping(dsn); err != nil {
		msg := fmt.Sprintf("postgres unreachable at %s (set %s): %v", dsn, postgresEnv, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg) // its server is unreachable
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{}); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	return db, dsn
}

func ping(dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}
