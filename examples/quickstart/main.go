// Command quickstart is the README's Quick start as a program: it takes a
// lock on PostgreSQL, with waiters queued and woken by LISTEN/NOTIFY and the
// lease kept alive in the background, writes an invoice's lines under it,
// stopping if the lease can no longer be renewed, and unlocks.
//
//	go run ./examples/quickstart -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// The body of run is the Quick start, word for word; a test checks that.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lines := []string{"2 h consulting", "1 licence", "travel"}
	save := func(ctx context.Context, line string, token int64) error {
		fmt.Printf("saved %q with token %d\n", line, token)
		return nil
	}
	if err := run(ctx, *dsn, lines, save); err != nil {
		log.Fatal(err)
	}
}

// run writes lines with save while it holds the lock on invoice-42; save
// stands for storage that refuses writes carrying an older token.
func run(ctx context.Context, dsn string, lines []string, save func(ctx context.Context, line string, token int64) error) error {
	db, err := sql.Open("pgx", dsn) // pgx; lib/pq ("postgres") listens with pqlisten.New(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := jdbc.CreateSchema(ctx, db); err != nil { // CREATE TABLE IF NOT EXISTS INT_LOCK ...; safe at every start
		return err
	}
	// WithListener (PostgreSQL only): waiters queue and a release wakes the next.
	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithListener(pgxlisten.New(db)))
	if err != nil {
		return err
	}
	locks, err := registry.New(repo, registry.WithTTL(30*time.Second), registry.WithKeepAlive())
	if err != nil {
		return err
	}
	defer locks.Close(ctx)

	l := locks.Obtain("invoice-42")
	if err := l.LockContext(ctx); err != nil { // waits; other instances queue behind us
		return err
	}
	defer l.Unlock() // a lease found lost goes to the registry's error handler
	for _, line := range lines {
		select {
		case <-l.Done(): // renewals failed: stop before the lease can expire
			return errors.New("invoice-42: lease not renewed, work stopped")
		default:
		}
		if err := save(ctx, line, l.Token()); err != nil { // storage refuses older tokens
			return err
		}
	}
	return nil
}
