package resequencer_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/resequencer"
)

// statementCounter counts the statements a pgx connection sends, BEGIN
// and COMMIT included.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// On PostgreSQL without Config.Locks, a message that releases nothing
// costs its Add alone: one statement, which commits on its own.
func TestAMessageThatReleasesNothingCostsOneStatementOnPostgres(t *testing.T) {
	b := testdb.Postgres(t)
	cfg, err := pgx.ParseConfig(b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	counter := &statementCounter{}
	cfg.Tracer = counter
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	store, err := sqlstore.New(db, sqlstore.Config{Region: testdb.RandomRegion(), DisableCleanup: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := testpub.NewRecorder()
	q, _ := newReseq(t, resequencer.Config{Store: store, Publisher: rec})
	for _, seq := range []int{3, 1, 4} {
		before := counter.n.Load()
		handle(t, q, part("g", seq, 5))
		if n := counter.n.Load() - before; n != 1 {
			t.Errorf("message %d of 5 (nothing to release) sent %d statements, want 1", seq, n)
		}
	}
	handle(t, q, part("g", 2, 5), part("g", 5, 5))
	wantSeqs(t, rec.On("out"), 1, 2, 3, 4, 5)
}
