package jdbc_test

import (
	"context"
	"errors"
	"slices"
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

// Misconfigurations that used to pass silently.

// withDSNParam returns db's MySQL DSN with param appended.
func withDSNParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}

func TestClientFoundRowsDoesNotGrantAHeldLock(t *testing.T) {
	// MySQL only: clientFoundRows is a go-sql-driver/mysql setting.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect == jdbc.MySQL }, func(t *testing.T, db testDB) {
		found := db
		found.DSN = withDSNParam(db.DSN, "clientFoundRows=true")
		found.DB = openPool(t, found.Driver, found.DSN)
		region := randomRegion()
		a := newRepo(t, found, jdbc.WithRegion(region))
		b := newRepo(t, found, jdbc.WithRegion(region))
		mustAcquire(t, a, "k", longTTL)
		mustNotAcquire(t, b, "k", longTTL)
		wantOwner(t, db, region, "k", a)
	})
}

func TestCustomAcquireQueryWithClientFoundRowsIsRefused(t *testing.T) {
	// clientFoundRows is a go-sql-driver/mysql setting.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect == jdbc.MySQL }, func(t *testing.T, db testDB) {
		found := openPool(t, db.Driver, withDSNParam(db.DSN, "clientFoundRows=true"))
		// Spring 6.1's kind of acquire: an unchanged row counts as one
		// affected with clientFoundRows=true, which reads as acquired.
		q := `INSERT INTO {prefix}LOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER)
			VALUES (:lock_key, :region, :client_id, {now}, {now+:ttl})
			ON DUPLICATE KEY UPDATE CLIENT_ID = IF(EXPIRED_AFTER < VALUES(CREATED_DATE), VALUES(CLIENT_ID), CLIENT_ID)`
		_, err := jdbc.NewLockRepository(t.Context(), found, jdbc.WithRegion(randomRegion()), jdbc.WithAcquireQuery(q))
		if !errors.Is(err, jdbc.ErrClientFoundRows) || !strings.Contains(err.Error(), "clientFoundRows=true") {
			t.Fatalf("got %v, want an error wrapping jdbc.ErrClientFoundRows naming clientFoundRows=true", err)
		}
	})
}

func TestAListenerThatCannotWorkWithTheDatabaseIsRefused(t *testing.T) {
	// Listeners are for PostgreSQL.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect == jdbc.Postgres }, func(t *testing.T, db testDB) {
		listeners := map[string]jdbc.Listener{
			"pqlisten with a malformed connection string": pqlisten.New("postgres://%zz"),
		}
		if db.Name == "postgres-pq" {
			listeners["pgxlisten on a lib/pq database"] = pgxlisten.New(db.DB)
		}
		for name, l := range listeners {
			_, err := jdbc.NewLockRepository(t.Context(), db.DB, jdbc.WithListener(l))
			if !errors.Is(err, jdbc.ErrInvalidOption) || !strings.Contains(err.Error(), "WithListener") {
				t.Errorf("%s: got %v, want an error wrapping jdbc.ErrInvalidOption naming WithListener", name, err)
			}
		}
	})
}

// sleeps makes repo's listener record the waits it asks for instead of
// waiting, until it has asked for n; the returned function waits for that
// and returns them.
func sleeps(t *testing.T, repo *jdbc.LockRepository, n int) func() []time.Duration {
	var (
		mu     sync.Mutex
		waits  []time.Duration
		enough = make(chan struct{})
	)
	jdbc.SetListenerSleep(repo, func(ctx context.Context, d time.Duration) bool {
		mu.Lock()
		waits = append(waits, d)
		got := len(waits)
		mu.Unlock()
		if got < n {
			return true
		}
		if got == n {
			close(enough)
		}
		<-ctx.Done() // the repository's Close
		return false
	})
	return func() []time.Duration {
		t.Helper()
		select {
		case <-enough:
		case <-time.After(time.Minute):
			t.Fatal("the listener did not retry")
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(waits)
	}
}

// wantBackoff checks that waits double from ListenerMinDelay up to
// ListenerMaxDelay, with jitter: each within [delay/2, delay].
func wantBackoff(t *testing.T, waits []time.Duration) {
	t.Helper()
	delay := jdbc.ListenerMinDelay
	for i, w := range waits {
		if w < delay/2 || w > delay {
			t.Fatalf("wait %d is %v, want between %v and %v (all: %v)", i, w, delay/2, delay, waits)
		}
		delay = min(2*delay, jdbc.ListenerMaxDelay)
	}
	if last := waits[len(waits)-1]; last < jdbc.ListenerMaxDelay/2 {
		t.Fatalf("the waits end at %v, below the cap's half %v (all: %v)", last, jdbc.ListenerMaxDelay/2, waits)
	}
}

func TestAListenerThatCannotConnectRetriesWithBackoffReportingEachFailureOnce(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, _ jdbc.Listener) {
		var l jdbc.Listener
		closeDB := func() {}
		if db.Name == "postgres-pgx" {
			pool := openPool(t, db.Driver, db.DSN)
			l, closeDB = pgxlisten.New(pool), func() { pool.Close() } // a database closed after start
		} else {
			l = pqlisten.New("postgres://postgres@127.0.0.1:1/none?sslmode=disable") // nobody listens on port 1
		}
		var reported atomic.Int32
		repo := newRepo(t, db, jdbc.WithListener(l), jdbc.WithErrorHandler(func(error) { reported.Add(1) }))
		const n = 12 // enough to reach the cap
		waits := sleeps(t, repo, n)
		closeDB()
		stop := repo.Notify("k", make(chan struct{}, 1)) // starts the listener
		defer stop()
		wantBackoff(t, waits())
		if got := reported.Load(); got != n {
			t.Fatalf("%d failures reported, want one per failed attempt, %d", got, n)
		}
	})
}

// readyThenFail is a listener that fails right after it has begun to
// listen.
type readyThenFail struct{}

func (readyThenFail) Listen(ctx context.Context, _ string, ready func(), _ func(string)) error {
	ready()
	return errors.New("the connection broke")
}

func TestAListenerFailingRightAfterListeningBacksOff(t *testing.T) {
	// One PostgreSQL backend is enough for a listener that needs none.
	forEachDBWhere(t, func(db testDB) bool { return db.Name == "postgres-pgx" }, func(t *testing.T, db testDB) {
		repo := newRepo(t, db, jdbc.WithListener(readyThenFail{}), jdbc.WithErrorHandler(func(error) {}))
		waits := sleeps(t, repo, 12)
		stop := repo.Notify("k", make(chan struct{}, 1))
		defer stop()
		wantBackoff(t, waits())
	})
}

func TestLockWithoutTheTablesReportsOnlyTheMissingTable(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		var (
			mu       sync.Mutex
			reported []error
		)
		repo := newRepo(t, db, jdbc.WithPrefix("ABSENT_"), jdbc.WithListener(l)) // no ABSENT_LOCK, no ABSENT_LOCK_WAIT
		reg, err := registry.New(repo, registry.WithErrorHandler(func(_ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, err)
		}))
		if err != nil {
			t.Fatal(err)
		}
		err = reg.Obtain("k").LockContext(t.Context())
		if !errors.Is(err, jdbc.ErrNoTable) {
			t.Fatalf("LockContext: got %v, want an error wrapping jdbc.ErrNoTable", err)
		}
		// Close waits for the clean-up after the failed attempt, then
		// closes the repository, which reports the missing table too.
		if err := reg.Close(t.Context()); !errors.Is(err, jdbc.ErrNoTable) {
			t.Fatalf("Close: got %v, want an error wrapping jdbc.ErrNoTable", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reported) > 0 {
			t.Fatalf("besides the error LockContext returned, the registry reported %v", reported)
		}
	})
}

func TestLeaveWithoutTheTablesIsNotAnError(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		repo := newRepo(t, db, jdbc.WithPrefix("ABSENT_"), jdbc.WithListener(l))
		if err := repo.Leave(t.Context(), "k"); err != nil {
			t.Fatalf("Leave: got %v, want nil: without the tables there is no place to leave", err)
		}
	})
}
