// Command perkey shows two instances of a service applying deposits to
// accounts with lockreg's Watermill middleware lockmw.PerKey: the deposits
// of one account are handled one at a time, whichever instance gets them,
// so the handler's read-modify-write of the balance loses no update, and
// the hold's fencing token guards the write against a holder that stalled
// past its lease.
//
// The instances share a lock table in one database; each deposit goes to
// one instance or the other, as competing consumers would get them. By
// default the database is an SQLite file and the transport a Watermill
// GoChannel, so no server is needed:
//
//	go run ./examples/perkey
//	go run ./examples/perkey -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/lockmw"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	dsn := flag.String("dsn", "sqlite:"+filepath.Join(os.TempDir(), "lockreg-perkey.db"), "database: sqlite:FILE, postgres://... or mysql://...")
	accounts := flag.Int("accounts", 3, "accounts")
	deposits := flag.Int("deposits", 10, "deposits per account, of 1, 2, ... units")
	flag.Parse()
	if err := run(os.Stdout, *dsn, *accounts, *deposits); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer, dsn string, accounts, deposits int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := jdbc.CreateSchema(ctx, db.DB); err != nil {
		return err
	}
	// This run's own lock region and accounts, so that earlier runs do not
	// count.
	runID := watermill.NewShortUUID()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS perkey_account (id VARCHAR(100) PRIMARY KEY, `+
		`balance BIGINT NOT NULL, deposits BIGINT NOT NULL, fence BIGINT NOT NULL)`); err != nil {
		return err
	}
	for a := 1; a <= accounts; a++ {
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO perkey_account (id, balance, deposits, fence) VALUES (?, 0, 0, 0)`),
			accountID(runID, a)); err != nil {
			return err
		}
	}

	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer pubSub.Close()
	var applied atomic.Int64
	for i := range 2 {
		// Each instance has its own lock repository (client id), registry
		// and router, and consumes its own share of the deposits.
		repo, err := jdbc.NewLockRepository(ctx, db.DB, jdbc.WithRegion("example-"+runID))
		if err != nil {
			return err
		}
		locks, err := registry.New(repo)
		if err != nil {
			return err
		}
		defer locks.Close(context.WithoutCancel(ctx))
		perKey, err := lockmw.PerKey(locks, lockmw.KeyFromMetadata("account_id"))
		if err != nil {
			return err
		}
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return err
		}
		// Retry outside the lock: each attempt takes the lock anew.
		router.AddMiddleware(middleware.Retry{MaxRetries: 3, InitialInterval: 50 * time.Millisecond}.Middleware, perKey)
		router.AddConsumerHandler("deposits", "deposits."+strconv.Itoa(i), pubSub, func(m *message.Message) error {
			if err := deposit(m.Context(), db, m); err != nil {
				return err
			}
			applied.Add(1)
			return nil
		})
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		defer func() { router.Close(); <-done }()
		<-router.Running()
	}

	// Deposits of 1, 2, ... units to each account, alternating between the
	// instances, so that both hold deposits of every account at once.
	n := 0
	for d := 1; d <= deposits; d++ {
		for a := 1; a <= accounts; a++ {
			m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(d)))
			m.Metadata.Set("account_id", accountID(runID, a))
			if err := pubSub.Publish("deposits."+strconv.Itoa(n%2), m); err != nil {
				return err
			}
			n++
		}
	}
	for applied.Load() < int64(n) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d deposits applied: %w", applied.Load(), n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	for a := 1; a <= accounts; a++ {
		var balance, count int64
		if err := db.QueryRowContext(ctx, db.Rebind(`SELECT balance, deposits FROM perkey_account WHERE id = ?`),
			accountID(runID, a)).Scan(&balance, &count); err != nil {
			return err
		}
		fmt.Fprintf(out, "account-%d: %d deposits, balance %d\n", a, count, balance)
	}
	return nil
}

// deposit adds a deposit to its account: a read-modify-write that is
// correct only because no other handler of the account runs meanwhile,
// and a write that the database refuses if a newer holder of the
// account's lock has written since (the fencing token). A deposit whose
// write committed but whose message is redelivered anyway (its lease was
// found lost at the unlock) would count twice; a real handler records the
// message's UUID in the transaction of its write.
func deposit(ctx context.Context, db *sqlx.DB, m *message.Message) error {
	token, ok := lockmw.Token(ctx)
	if !ok {
		return errors.New("deposit: not under a lock")
	}
	amount, err := strconv.ParseInt(string(m.Payload), 10, 64)
	if err != nil {
		return fmt.Errorf("deposit %s: %w", m.UUID, err)
	}
	account := m.Metadata.Get("account_id")
	var balance, count int64
	if err := db.QueryRowContext(ctx, db.Rebind(`SELECT balance, deposits FROM perkey_account WHERE id = ?`),
		account).Scan(&balance, &count); err != nil {
		return err
	}
	time.Sleep(2 * time.Millisecond) // some work between the read and the write
	res, err := db.ExecContext(ctx, db.Rebind(`UPDATE perkey_account SET balance = ?, deposits = ?, fence = ? WHERE id = ? AND fence < ?`),
		balance+amount, count+1, token, account, token)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("deposit %s: the write with token %d was refused (%v): a newer holder wrote first", m.UUID, token, err)
	}
	return nil
}

func accountID(run string, a int) string { return run + "-account-" + strconv.Itoa(a) }

func open(dsn string) (*sqlx.DB, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return sqlx.Open("pgx", dsn)
	case strings.HasPrefix(dsn, "mysql://"):
		return sqlx.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	case strings.HasPrefix(dsn, "sqlite:"):
		file := strings.TrimPrefix(dsn, "sqlite:")
		return sqlx.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	}
	return nil, fmt.Errorf("unknown database in -dsn %q: use sqlite:FILE, postgres://... or mysql://...", dsn)
}
