// Command fencing shows how a fencing token keeps a holder that stalled past
// its lease from overwriting newer work.
//
// Two instances update one account balance under a lock. The slow one reads
// the balance, then stalls (a long GC pause, a frozen VM) until its lease has
// expired and the fast one has taken the lock and written. When the slow one
// wakes it still believes it holds the lock, but its write carries the older
// token, so the database refuses it:
//
//	UPDATE ledger SET balance = ?, fence = ? WHERE account = ? AND fence < ?
//
// By default the lock table and the ledger live in an SQLite file, so no
// server is needed:
//
//	go run ./examples/fencing
//	go run ./examples/fencing -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	dsn := flag.String("dsn", "sqlite:"+filepath.Join(os.TempDir(), "lockreg-fencing.db"), "database: sqlite:FILE or postgres://...")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *dsn); err != nil {
		log.Fatal(err)
	}
}

const lease = 300 * time.Millisecond

func run(ctx context.Context, out io.Writer, dsn string) error {
	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		return err
	}
	account := fmt.Sprintf("account-%d", time.Now().UnixNano()) // fresh for every run
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ledger (account VARCHAR(100) PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL)`); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO ledger (account, balance, fence) VALUES (?, 0, 0)`), account); err != nil {
		return err
	}

	slow, err := instance(db)
	if err != nil {
		return err
	}
	defer slow.Close(context.Background())
	fast, err := instance(db)
	if err != nil {
		return err
	}
	defer fast.Close(context.Background())

	// The slow instance takes the lock and reads the balance.
	ls := slow.Obtain(account)
	if err := ls.LockContext(ctx); err != nil {
		return err
	}
	slowToken := ls.Token()
	balance, err := read(ctx, db, account)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "slow: holds the lock, reads balance %d, then stalls past its %v lease\n", balance, lease)

	// Meanwhile the lease expires and the fast instance takes over.
	lf := fast.Obtain(account)
	if err := lf.LockContext(ctx); err != nil {
		return err
	}
	fastToken := lf.Token()
	b, err := read(ctx, db, account)
	if err != nil {
		return err
	}
	ok, err := write(ctx, db, account, b+100, fastToken)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "fast: takes the expired lock with a greater token (%v), adds 100: %s\n", fastToken > slowToken, verdict(ok))
	if err := lf.UnlockContext(ctx); err != nil {
		return err
	}

	// The slow instance wakes up and writes what it computed before.
	ok, err = write(ctx, db, account, balance+10, slowToken)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "slow: wakes up, adds 10 with its old token: %s\n", verdict(ok))
	select {
	case <-ls.Done():
		fmt.Fprintln(out, "slow: its Done channel had already closed, before the lease could expire")
	default:
	}
	err = ls.UnlockContext(ctx)
	fmt.Fprintf(out, "slow: unlock says the lease was lost: %v\n", err != nil)

	final, err := read(ctx, db, account)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "final balance: %d\n", final)
	return nil
}

func instance(db *sqlx.DB) (*registry.Registry, error) {
	repo, err := jdbc.NewLockRepository(context.Background(), db)
	if err != nil {
		return nil, err
	}
	return registry.New(repo, registry.WithTTL(lease), registry.WithIdleBetweenTries(20*time.Millisecond),
		registry.WithErrorHandler(func(string, error) {}))
}

func read(ctx context.Context, db *sqlx.DB, account string) (int64, error) {
	var b int64
	err := db.QueryRowContext(ctx, db.Rebind(`SELECT balance FROM ledger WHERE account = ?`), account).Scan(&b)
	return b, err
}

// write stores balance only if no holder with a greater token wrote since.
func write(ctx context.Context, db *sqlx.DB, account string, balance, token int64) (bool, error) {
	res, err := db.ExecContext(ctx, db.Rebind(`UPDATE ledger SET balance = ?, fence = ? WHERE account = ? AND fence < ?`),
		balance, token, account, token)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func verdict(ok bool) string {
	if ok {
		return "accepted"
	}
	return "refused, a newer holder has written"
}

func open(dsn string) (*sqlx.DB, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return sqlx.Open("pgx", dsn)
	case strings.HasPrefix(dsn, "sqlite:"):
		return sqlx.Open("sqlite", "file:"+strings.TrimPrefix(dsn, "sqlite:")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	}
	return nil, fmt.Errorf("unknown database in -dsn %q: use sqlite:FILE or postgres://...", dsn)
}
