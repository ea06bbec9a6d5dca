package tooltest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/jdbc/pqlisten"
	"github.com/lockreg/lockreg/registry"
)

// What the jdbc package documentation says of PgBouncer, checked against a
// real one (see pgbouncer_harness_test.go).

// pgDriver is a PostgreSQL driver as the documentation tells its users to
// configure it.
type pgDriver struct {
	name, driver string
	// exec is the DSN parameter that keeps the driver from preparing
	// statements itself, for transaction pooling.
	exec     string
	listener func(db *sql.DB, dsn string) jdbc.Listener
}

var pgDrivers = []pgDriver{
	{"pgx", "pgx", "default_query_exec_mode=exec", func(db *sql.DB, _ string) jdbc.Listener { return pgxlisten.New(db) }},
	{"libpq", "postgres", "binary_parameters=yes", func(_ *sql.DB, dsn string) jdbc.Listener { return pqlisten.New(dsn) }},
}

func forEachDriver(t *testing.T, test func(t *testing.T, d pgDriver)) {
	for _, d := range pgDrivers {
		t.Run(d.name, func(t *testing.T) { test(t, d) })
	}
}

// newRegistry returns a registry over a repository of its own on db and
// closes it when t ends.
func newRegistry(t testing.TB, db *sql.DB, jopts []jdbc.Option, ropts ...registry.Option) (*registry.Registry, *jdbc.LockRepository) {
	t.Helper()
	repo, err := jdbc.NewLockRepository(context.Background(), db, jopts...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.New(repo, ropts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r, repo
}

// contend has four registries on db take turns on one key and checks
// that no two hold it at once and that tokens increase.
func contend(t *testing.T, db *sql.DB, jopts ...jdbc.Option) {
	t.Helper()
	const registries, turns = 4, 25
	var (
		inside atomic.Int32
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	for range registries {
		r, _ := newRegistry(t, db, jopts, registry.WithIdleBetweenTries(5*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := r.Obtain("k")
			for range turns {
				if err := l.LockContext(t.Context()); err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := l.UnlockContext(t.Context()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != registries*turns {
		t.Fatalf("%d turns, want %d", len(tokens), registries*turns)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d of turn %d is not greater than %d before it", tokens[i], i, tokens[i-1])
		}
	}
}

// handOff checks that a release wakes a waiter of another registry that
// polls only every hour: only a notification can hand it the lock before
// its context ends. The waiter's repository listens with l.
func handOff(t *testing.T, db *sql.DB, l jdbc.Listener, prefix string, jopts ...jdbc.Option) {
	t.Helper()
	jopts = append(jopts, jdbc.WithPrefix(prefix))
	r1, _ := newRegistry(t, db, jopts)
	r2, repo2 := newRegistry(t, db, append(jopts, jdbc.WithListener(l)), registry.WithIdleBetweenTries(time.Hour))
	l1 := r1.Obtain("k")
	if err := l1.LockContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l2 := r2.Obtain("k")
		err := l2.LockContext(ctx)
		if err == nil {
			err = l2.UnlockContext(t.Context())
		}
		got <- err
	}()
	waitQueued(t, db, prefix, repo2.ClientID())
	if err := l1.UnlockContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the release did not wake the waiter: %v", err)
	}
}

// waitQueued waits until client has a place in the waiter queue of the
// lock table with prefix.
func waitQueued(t testing.TB, db *sql.DB, prefix, client string) {
	t.Helper()
	table := prefix + "LOCK_WAIT"
	for range 1000 {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM `+table+` WHERE CLIENT_ID = $1`, client).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("client %s never queued", client)
}

func TestCreateSchemaThroughPgBouncerInEitherPoolMode(t *testing.T) {
	b := startPgBouncer(t)
	forEachDriver(t, func(t *testing.T, d pgDriver) {
		for _, pool := range []string{sessionPool, transactionPool} {
			t.Run(pool, func(t *testing.T) {
				db := open(t, d.driver, b.dsn(pool, d.exec))
				opt := jdbc.WithPrefix(schema(t, b, db)) // creates the tables
				if err := jdbc.CreateSchema(t.Context(), db, opt); err != nil {
					t.Fatalf("CreateSchema again: %v", err)
				}
				repo, err := jdbc.NewLockRepository(t.Context(), db, opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := repo.Check(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// Session pooling gives each client connection a server connection of its
// own: the defaults work, prepared statements and listener included.
func TestPgBouncerSessionPoolingWorksWithTheDefaults(t *testing.T) {
	b := startPgBouncer(t)
	forEachDriver(t, func(t *testing.T, d pgDriver) {
		dsn := b.dsn(sessionPool, "")
		db := open(t, d.driver, dsn)
		db.SetMaxOpenConns(4)
		prefix := schema(t, b, db)
		t.Run("locks", func(t *testing.T) { contend(t, db, jdbc.WithPrefix(prefix)) })
		t.Run("listener", func(t *testing.T) { handOff(t, db, d.listener(db, dsn), prefix) })
	})
}

// In transaction pooling the repository's statements work once neither
// lockreg nor the driver prepares them, also when PgBouncer replaces its
// server connections between them.
func TestPgBouncerTransactionPoolingWorksWithoutPreparedStatements(t *testing.T) {
	b := startPgBouncer(t)
	forEachDriver(t, func(t *testing.T, d pgDriver) {
		db := open(t, d.driver, b.dsn(transactionPool, d.exec))
		db.SetMaxOpenConns(1) // one client connection, on whichever server connection
		opts := []jdbc.Option{jdbc.WithPrefix(schema(t, b, db)), jdbc.WithoutPreparedStatements()}
		repo, err := jdbc.NewLockRepository(t.Context(), db, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer repo.Close(context.Background())
		steps := []struct {
			name string
			run  func() error
		}{
			{"acquire", func() error {
				_, ok, err := repo.Acquire(t.Context(), "k", time.Minute)
				if err == nil && !ok {
					err = errors.New("not acquired")
				}
				return err
			}},
			{"renew", func() error { return repo.Renew(t.Context(), "k", time.Minute) }},
			{"release", func() error { return repo.Release(t.Context(), "k") }},
		}
		for range 2 {
			for _, s := range steps {
				if err := s.run(); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				b.reconnect(t, transactionPool)
			}
		}
	})
}

func TestPgBouncerTransactionPoolingExcludesAcrossServerConnections(t *testing.T) {
	b := startPgBouncer(t)
	forEachDriver(t, func(t *testing.T, d pgDriver) {
		db := open(t, d.driver, b.dsn(transactionPool, d.exec))
		db.SetMaxOpenConns(8) // more client connections than the 2 server connections
		contend(t, db, jdbc.WithPrefix(schema(t, b, db)), jdbc.WithoutPreparedStatements())
	})
}

// LISTEN needs a session of its own, which transaction pooling does not
// keep: the documentation says to point the listener at PostgreSQL
// itself while the repository's statements go through PgBouncer.
func TestPgBouncerTransactionPoolingWithAListenerOnADirectConnection(t *testing.T) {
	b := startPgBouncer(t)
	forEachDriver(t, func(t *testing.T, d pgDriver) {
		db := open(t, d.driver, b.dsn(transactionPool, d.exec))
		direct := open(t, d.driver, b.direct)
		handOff(t, db, d.listener(direct, b.direct), schema(t, b, db), jdbc.WithoutPreparedStatements())
	})
}

// Without WithoutPreparedStatements, a statement the repository prepared on
// one server connection is missing on the next; the error says what to do.
// Renew is such a statement with every driver (pgx's Acquire and Release
// are sent by their text, and prepared or not as the DSN tells pgx).
func TestPgBouncerTransactionPoolingPreparedStatementErrorNamesTheOption(t *testing.T) {
	b := startPgBouncer(t)
	forEachDriver(t, func(t *testing.T, d pgDriver) {
		db := open(t, d.driver, b.dsn(transactionPool, d.exec))
		db.SetMaxOpenConns(1)
		repo, err := jdbc.NewLockRepository(t.Context(), db, jdbc.WithPrefix(schema(t, b, db)))
		if err != nil {
			t.Fatal(err)
		}
		defer repo.Close(context.Background())
		if _, _, err := repo.Acquire(t.Context(), "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := repo.Renew(t.Context(), "k", time.Minute); err != nil {
			t.Fatal(err) // prepares the statement
		}
		b.reconnect(t, transactionPool)
		err = repo.Renew(t.Context(), "k", time.Minute)
		if err == nil || !strings.Contains(err.Error(), "jdbc.WithoutPreparedStatements") {
			t.Fatalf("Renew on a new server connection: %v; want an error naming jdbc.WithoutPreparedStatements", err)
		}
	})
}

// pgx prepares and caches statements itself unless its DSN says
// default_query_exec_mode=exec: a statement it prepared on one server
// connection is missing on the next, and the error says what to do, also
// for the statements the repository leaves unprepared.
func TestPgBouncerTransactionPoolingPgxOwnPreparedStatementErrorNamesTheSetting(t *testing.T) {
	b := startPgBouncer(t)
	db := open(t, "pgx", b.dsn(transactionPool, "")) // pgx's default: cache_statement
	db.SetMaxOpenConns(1)
	repo, err := jdbc.NewLockRepository(t.Context(), db, jdbc.WithPrefix(schema(t, b, db)), jdbc.WithoutPreparedStatements())
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close(context.Background())
	for range 2 { // the first acquisition of a key and the later ones send different statements
		if _, _, err := repo.Acquire(t.Context(), "k", time.Minute); err != nil {
			t.Fatal(err) // pgx prepares the statement
		}
	}
	b.reconnect(t, transactionPool)
	_, _, err = repo.Acquire(t.Context(), "k", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
		t.Fatalf("Acquire on a new server connection: %v; want an error naming default_query_exec_mode=exec", err)
	}
}
