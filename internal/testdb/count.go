package testdb

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
)

// Statements counts the statements a pool sends, BEGIN and COMMIT
// included: the round trips a test of a cost checks.
type Statements struct{ n atomic.Int64 }

// N is the number of statements sent so far.
func (s *Statements) N() int64 { return s.n.Load() }

// TraceQueryStart implements pgx.QueryTracer.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (*Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// CountingPostgres opens a pool on PostgreSQL's test database through pgx
// whose statements the returned Statements counts; it is closed when t
// ends, and t is skipped (failed when CI=true) if the server cannot be
// reached.
func CountingPostgres(t testing.TB) (*sql.DB, *Statements) {
	t.Helper()
	b := Postgres(t)
	cfg, err := pgx.ParseConfig(b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	counter := &Statements{}
	cfg.Tracer = counter
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db, counter
}

// CountingStore is a message-group store on a CountingPostgres pool, in a
// region of its own and without clean-up, with the pool's Statements.
func CountingStore(t testing.TB) (*sqlstore.Store, *Statements) {
	t.Helper()
	db, counter := CountingPostgres(t)
	store, err := sqlstore.New(db, sqlstore.Config{Region: RandomRegion(), DisableCleanup: true})
	if err != nil {
		t.Fatal(err)
	}
	return store, counter
}
