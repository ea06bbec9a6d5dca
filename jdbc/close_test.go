package jdbc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

func TestCloseReleasesUnheldRowsButNotHeldOnes(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, repo, other := twoClients(t, db)
		mustAcquire(t, repo, "held", longTTL)
		mustAcquire(t, other, "theirs", longTTL)
		// A row of this client it does not hold: left behind by a failed
		// release, or by an earlier process with the same client id.
		now := time.Now()
		db.InsertSpringRow(t, table, region, jdbc.UUIDKey("left-behind"), repo.ClientID(), now, now.Add(time.Hour))

		if err := repo.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantReleased(t, db, region, "left-behind")
		wantOwner(t, db, region, "held", repo)
		wantOwner(t, db, region, "theirs", other)
	})
}

func TestCloseWithNothingHeldReleasesAllItsRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, repo, other := twoClients(t, db)
		mustAcquire(t, repo, "released", longTTL)
		if err := repo.Release(t.Context(), "released"); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, other, "theirs", longTTL)
		now := time.Now()
		db.InsertSpringRow(t, table, region, jdbc.UUIDKey("left-1"), repo.ClientID(), now, now.Add(time.Hour))
		db.InsertSpringRow(t, table, region, jdbc.UUIDKey("left-2"), repo.ClientID(), now, now.Add(-time.Hour))

		if err := repo.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantReleased(t, db, region, "left-1")
		wantReleased(t, db, region, "left-2")
		wantOwner(t, db, region, "theirs", other)
	})
}

func TestCloseSparesALockBeingAcquired(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.Dialect == jdbc.SQLite {
			t.Skip("requires row locks: SQLite locks the whole database, so Close would wait for the blocking transaction too")
		}
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		now := time.Now()
		// This client's rows, not held: one that an Acquire is about to take
		// (the row it waits for) and one left behind.
		db.InsertSpringRow(t, table, region, jdbc.UUIDKey("in-flight"), repo.ClientID(), now, now.Add(-time.Minute))
		db.InsertSpringRow(t, table, region, jdbc.UUIDKey("left-behind"), repo.ClientID(), now, now.Add(time.Hour))

		blocker, unblock := db.blockRow(t, table, region, jdbc.UUIDKey("in-flight"))
		type result struct {
			ok  bool
			err error
		}
		acquired := make(chan result, 1)
		go func() {
			_, ok, err := repo.Acquire(context.Background(), "in-flight", longTTL)
			acquired <- result{ok, err}
		}()
		db.waitBlocked(t, blocker) // the Acquire statement is in flight

		closed := make(chan error, 1)
		go func() { closed <- repo.Close(context.Background()) }()
		select {
		case err := <-closed:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(15 * time.Second):
			unblock()
			<-acquired
			<-closed
			t.Fatal("Close waited for the row being acquired: it tried to delete it")
		}
		unblock()
		if r := <-acquired; r.err != nil || !r.ok {
			t.Fatalf("Acquire = %v, %v; want true, nil", r.ok, r.err)
		}
		wantOwner(t, db, region, "in-flight", repo)
		wantReleased(t, db, region, "left-behind")
	})
}

func TestFailedReacquireKeepsTheLockHeld(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "k", longTTL)
		canceled, cancel := context.WithCancel(t.Context())
		cancel()
		if _, _, err := repo.Acquire(canceled, "k", longTTL); err == nil {
			t.Fatal("Acquire with a canceled context succeeded")
		}
		if err := repo.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantOwner(t, db, region, "k", repo)
	})
}

func TestAcquireAfterCloseIsErrClosedWhileRenewAndReleaseWork(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, repo, "held", longTTL)
		if err := repo.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := repo.Acquire(t.Context(), "new", longTTL); ok || !errors.Is(err, registry.ErrClosed) {
			t.Fatalf("Acquire after Close = %v, %v; want false and an error wrapping registry.ErrClosed", ok, err)
		}
		wantNoRow(t, db, region, "new")
		if err := repo.Renew(t.Context(), "held", longTTL); err != nil {
			t.Fatalf("Renew after Close: %v", err)
		}
		if err := repo.Release(t.Context(), "held"); err != nil {
			t.Fatalf("Release after Close: %v", err)
		}
		wantReleased(t, db, region, "held")
	})
}

func TestCloseIsIdempotent(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		repo := newRepo(t, db)
		mustAcquire(t, repo, "k", longTTL)
		for range 3 {
			if err := repo.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestCustomAcquireQueryIsUsed(t *testing.T) {
	// Spring's documented tweak, "insert only if absent", writing a
	// recognisable CREATED_DATE.
	const values = `(LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER)
		VALUES (:lock_key, :region, :client_id, '2000-01-01 00:00:00.000', {now+:ttl})`
	queries := map[jdbc.Dialect]string{
		jdbc.Postgres: `INSERT INTO {prefix}LOCK ` + values + ` ON CONFLICT DO NOTHING`,
		jdbc.MySQL:    `INSERT IGNORE INTO {prefix}LOCK ` + values,
		jdbc.SQLite:   `INSERT INTO {prefix}LOCK ` + values + ` ON CONFLICT DO NOTHING`,
	}
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		opt := jdbc.WithAcquireQuery(queries[db.Dialect])
		a := newRepo(t, db, jdbc.WithRegion(region), opt)
		b := newRepo(t, db, jdbc.WithRegion(region), opt)
		mustAcquire(t, a, "k", longTTL)
		mustNotAcquire(t, b, "k", longTTL)
		if l := wantOwner(t, db, region, "k", a); l.Created.Year() != 2000 {
			t.Fatalf("CREATED_DATE = %v; the custom query was not used", l.Created)
		}
	})
}

func TestCustomRenewQueryIsUsed(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		// Spring's renew: no expiry check, so it revives an expired lease.
		repo := newRepo(t, db, jdbc.WithRenewQuery(`UPDATE {prefix}LOCK SET EXPIRED_AFTER = {now+:ttl} `+
			`WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id`))
		mustAcquire(t, repo, "k", shortTTL)
		expire()
		if err := repo.Renew(t.Context(), "k", longTTL); err != nil {
			t.Fatalf("the custom renew query was not used: %v", err)
		}
	})
}

// A custom query follows the one templating rule of the package doc: the
// macros expand to the dialect's SQL, and a colon in a string literal or a
// comment is no parameter.
func TestCustomQueryExpandsMacrosAndKeepsColonsInStrings(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		// A release that marks the row: CREATED_DATE 2000-01-01 00:00:00.
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithReleaseQuery(
			`UPDATE {prefix}LOCK SET EXPIRED_AFTER = {past}, CREATED_DATE = '2000-01-01 00:00:00.000' -- not :a parameter
			WHERE REGION = :region AND LOCK_KEY = :lock_key AND CLIENT_ID = :client_id /* nor :this */`))
		mustAcquire(t, repo, "k", longTTL)
		if err := repo.Release(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		l, ok := db.Lease(t, table, region, jdbc.UUIDKey("k"))
		if !ok || l.Remaining >= 0 || l.Created.Year() != 2000 || l.Created.Hour() != 0 {
			t.Fatalf("the row after the custom release: %+v, %v; want it expired and created 2000-01-01 00:00:00", l, ok)
		}
	})
}

func TestCustomReleaseQueryIsUsed(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, a, b := twoClients(t, db)
		// A forced release, whoever holds the lock.
		forcing := newRepo(t, db, jdbc.WithRegion(region),
			jdbc.WithReleaseQuery(`DELETE FROM {prefix}LOCK WHERE REGION = :region AND LOCK_KEY = :lock_key`))
		mustAcquire(t, a, "k", longTTL)
		if err := forcing.Release(t.Context(), "k"); err != nil {
			t.Fatalf("the custom release query was not used: %v", err)
		}
		mustAcquire(t, b, "k", longTTL)
	})
}

func TestLockContentionIsTransient(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		other := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, other, "k", longTTL)

		// The repository's own connection gives up waiting for locks quickly.
		conn := db.conn(t)
		setting := map[jdbc.Dialect]string{
			jdbc.Postgres: `SET lock_timeout = '100ms'`,
			jdbc.MySQL:    `SET SESSION innodb_lock_wait_timeout = 1`,
			jdbc.SQLite:   `PRAGMA busy_timeout = 0`,
		}[db.Dialect]
		if _, err := conn.ExecContext(t.Context(), setting); err != nil {
			t.Fatal(err)
		}
		repo := newRepoOn(t, conn, jdbc.WithRegion(region))

		_, unblock := db.blockRow(t, table, region, jdbc.UUIDKey("k"))
		_, _, err := repo.Acquire(t.Context(), "k", longTTL)
		unblock()
		if !errors.Is(err, registry.ErrTransient) {
			t.Fatalf("got %v, want an error wrapping registry.ErrTransient", err)
		}
		wantCode(t, db.Dialect, err, map[jdbc.Dialect]string{jdbc.Postgres: "55P03", jdbc.MySQL: "1205", jdbc.SQLite: "5"}[db.Dialect])
	})
}

func TestDeadlineWhileWaitingWrapsTheContextError(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		other := newRepo(t, db, jdbc.WithRegion(region))
		mustAcquire(t, other, "k", longTTL)
		var repo *jdbc.LockRepository
		if db.Dialect == jdbc.SQLite {
			// A busy handler that outwaits the deadline.
			repo = newRepoOn(t, openPool(t, db.Driver, db.DSN), jdbc.WithRegion(region))
		} else {
			repo = newRepo(t, db, jdbc.WithRegion(region))
		}

		_, unblock := db.blockRow(t, table, region, jdbc.UUIDKey("k"))
		defer unblock()
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, _, err := repo.Acquire(ctx, "k", longTTL)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, registry.ErrTransient) {
			t.Fatalf("got %v, want an error wrapping context.DeadlineExceeded, not transient", err)
		}
	})
}

func TestCanceledContextIsNotTransient(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		repo := newRepo(t, db)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _, err := repo.Acquire(ctx, "k", longTTL)
		if !errors.Is(err, context.Canceled) || errors.Is(err, registry.ErrTransient) {
			t.Fatalf("Acquire: got %v, want an error wrapping context.Canceled, not transient", err)
		}
		err = repo.Release(ctx, "k")
		if !errors.Is(err, context.Canceled) || errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Release: got %v, want an error wrapping context.Canceled", err)
		}
	})
}

// unreachable are DSNs of servers that refuse connections.
var unreachable = []struct{ name, driver, dsn string }{
	{"postgres-pgx", "pgx", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"},
	{"postgres-pq", "postgres", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"},
	{"mariadb", "mysql", "root@tcp(127.0.0.1:1)/test?timeout=5s"},
}

// NewLockRepository checks the table, so an unreachable server is its
// error, a transient one that the caller may retry.
func TestNewLockRepositoryOnAnUnreachableServerIsTransient(t *testing.T) {
	for _, c := range unreachable {
		t.Run(c.name, func(t *testing.T) {
			db := openPool(t, c.driver, c.dsn)
			repo, err := jdbc.NewLockRepository(t.Context(), db)
			if repo != nil || !errors.Is(err, registry.ErrTransient) {
				t.Fatalf("NewLockRepository: got %v, %v; want an error wrapping registry.ErrTransient", repo, err)
			}
		})
	}
}

// A server that becomes unreachable after the repository was made fails
// its operations with transient errors.
func TestUnreachableServerIsTransient(t *testing.T) {
	// Not on SQLite, which has no server to lose.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect != jdbc.SQLite }, func(t *testing.T, db testDB) {
		p := startCutProxy(t, db)
		repo, err := jdbc.NewLockRepository(t.Context(), openPool(t, db.Driver, p.dsn))
		if err != nil {
			t.Fatal(err)
		}
		p.cut()
		_, _, err = repo.Acquire(t.Context(), uuid.NewString(), longTTL)
		if !errors.Is(err, registry.ErrTransient) {
			t.Fatalf("Acquire: got %v, want an error wrapping registry.ErrTransient", err)
		}
		if err := repo.Close(t.Context()); !errors.Is(err, registry.ErrTransient) {
			t.Fatalf("Close: got %v, want an error wrapping registry.ErrTransient", err)
		}
	})
}

// cutProxy forwards TCP connections to db's server until cut, which closes
// them and its listener, so that the server is unreachable through it.
type cutProxy struct {
	dsn string // db's DSN through the proxy
	ln  net.Listener

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, db testDB) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	var target string
	if db.Dialect == jdbc.MySQL {
		cfg, err := mysql.ParseDSN(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		target, cfg.Addr = cfg.Addr, ln.Addr().String()
		p.dsn = cfg.FormatDSN()
	} else {
		u, err := url.Parse(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		target, u.Host = u.Host, ln.Addr().String()
		p.dsn = u.String()
	}
	p.wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			p.wg.Go(func() { pipe(server, client) })
			p.wg.Go(func() { pipe(client, server) })
		}
	})
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
