package jdbc_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// springClient replays Spring Integration 5.4-6.x's DefaultLockRepository
// on a table without EXPIRED_AFTER, statement for statement: acquire is
// its UPDATE then, when that changed nothing, its INSERT (a duplicate key
// is "not acquired"), in one REQUIRES_NEW transaction at the version's
// isolation; unlock is its DELETE and renew its UPDATE of CREATED_DATE,
// each in a transaction at the database's default isolation. Times are the
// application's clock, bound as parameters: 6.x binds
// Timestamp.valueOf(LocalDateTime.now(ZoneOffset.UTC)), UTC wall time
// whatever the JVM's zone; 5.x binds new Date(), the wall time of the
// JVM's zone (set jvmZone). Expiry is CREATED_DATE < now - ttl.
type springClient struct {
	db       testDB
	pool     *sql.DB
	table    string
	region   string
	id       string
	ttl      time.Duration
	iso      sql.IsolationLevel
	jvmZone  *time.Location // nil: 6.x, UTC wall time
	acquired atomic.Int32
}

// springVersion is one Spring Integration version's acquire behaviour.
type springVersion struct {
	name string
	iso  sql.IsolationLevel
	date bool // binds new Date() in the JVM's zone (5.x)
}

var springVersions = []springVersion{
	{"spring-5.4-serializable", sql.LevelSerializable, true},
	{"spring-6.0.7-serializable", sql.LevelSerializable, false},
	{"spring-6.2-read-committed", sql.LevelReadCommitted, false},
}

func newSpring(db testDB, pool *sql.DB, prefix, region string, v springVersion, ttl time.Duration) *springClient {
	c := &springClient{db: db, pool: pool, table: prefix + "LOCK", region: region, id: uuid.NewString(), ttl: ttl, iso: v.iso}
	if v.date {
		c.jvmZone = time.UTC // a 5.x JVM must run in UTC to share with lockreg
	}
	return c
}

// now is the time Spring binds.
func (c *springClient) now() any {
	t := time.Now()
	if c.jvmZone != nil {
		t = t.In(c.jvmZone) // new Date(): the JVM zone's wall time
	} else {
		t = t.UTC() // LocalDateTime.now(ZoneOffset.UTC)
	}
	t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC).Truncate(time.Millisecond)
	if c.db.Dialect == jdbc.SQLite {
		return t.Format(sqliteTime)
	}
	return t
}

func (c *springClient) ago(d time.Duration) any {
	switch t := c.now().(type) {
	case time.Time:
		return t.Add(-d)
	default:
		p, _ := time.Parse(sqliteTime, t.(string))
		return p.Add(-d).Format(sqliteTime)
	}
}

// isTransient is what Spring's JdbcLock retries: serialization failures,
// deadlocks, lock wait timeouts.
func isTransient(err error) bool {
	s := err.Error()
	for _, code := range []string{"40001", "40P01", "1213", "1205", "could not serialize"} {
		if strings.Contains(s, code) {
			return true
		}
	}
	return false
}

func isDuplicateKey(err error) bool {
	s := err.Error()
	return strings.Contains(s, "23505") || strings.Contains(s, "1062") || strings.Contains(s, "UNIQUE constraint")
}

// acquire is DefaultLockRepository.acquire; a transient failure counts as
// not acquired (JdbcLock retries it).
func (c *springClient) acquire(t testing.TB, key string) bool {
	t.Helper()
	ctx := context.Background()
	tx, err := c.pool.BeginTx(ctx, &sql.TxOptions{Isolation: c.iso})
	if err != nil {
		t.Fatalf("spring begin: %v", err)
	}
	defer tx.Rollback()
	path := jdbc.UUIDKey(key)
	res, err := tx.ExecContext(ctx, c.db.Q(`UPDATE `+c.table+` SET CLIENT_ID=?, CREATED_DATE=? WHERE REGION=? AND LOCK_KEY=? AND (CLIENT_ID=? OR CREATED_DATE<?)`),
		c.id, c.now(), c.region, path, c.id, c.ago(c.ttl))
	if err != nil {
		if isTransient(err) {
			return false
		}
		t.Fatalf("spring update: %v", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		_, err = tx.ExecContext(ctx, c.db.Q(`INSERT INTO `+c.table+` (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE) VALUES (?, ?, ?, ?)`),
			c.region, path, c.id, c.now())
		if err != nil {
			if isDuplicateKey(err) || isTransient(err) {
				return false
			}
			t.Fatalf("spring insert: %v", err)
		}
	}
	if err := tx.Commit(); err != nil {
		if isTransient(err) {
			return false
		}
		t.Fatalf("spring commit: %v", err)
	}
	c.acquired.Add(1)
	return true
}

// delete is DefaultLockRepository.delete (JdbcLock.unlock); it reports
// whether the row was this client's.
func (c *springClient) delete(t testing.TB, key string) bool {
	t.Helper()
	for {
		res, err := c.pool.ExecContext(context.Background(), c.db.Q(`DELETE FROM `+c.table+` WHERE REGION=? AND LOCK_KEY=? AND CLIENT_ID=?`),
			c.region, jdbc.UUIDKey(key), c.id)
		if err != nil {
			if isTransient(err) {
				continue // JdbcLock.unlock retries
			}
			t.Fatalf("spring delete: %v", err)
		}
		n, _ := res.RowsAffected()
		return n == 1
	}
}

// spring6Interop runs test for each Spring version on PostgreSQL and
// MariaDB (Spring has no SQLite support), on a fresh Spring 5.4-6.x table
// that CreateSchema gave FENCE.
func spring6Interop(t *testing.T, test func(t *testing.T, db testDB, p *sql.DB, prefix, region string, v springVersion)) {
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect != jdbc.SQLite }, func(t *testing.T, db testDB) {
		for _, v := range springVersions {
			t.Run(v.name, func(t *testing.T) {
				st, p, region := spring6Table(t, db)
				if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
					t.Fatal(err)
				}
				test(t, db, p, st.prefix, region, v)
			})
		}
	})
}

const springTTL = 10 * time.Second // Spring's DEFAULT_TTL, and lockreg's registry default

func TestSpring6AndLockregHandALockOverBothWays(t *testing.T) {
	spring6Interop(t, func(t *testing.T, db testDB, p *sql.DB, prefix, region string, v springVersion) {
		repo := newRepoOn(t, p, jdbc.WithPrefix(prefix), jdbc.WithRegion(region))
		if repo.Layout() != jdbc.LayoutSpring6 {
			t.Fatalf("Layout() = %q", repo.Layout())
		}
		java := newSpring(db, p, prefix, region, v, springTTL)

		mustAcquire(t, repo, "order", springTTL)
		if java.acquire(t, "order") {
			t.Fatal("Spring took the lock lockreg holds")
		}
		if err := repo.Release(t.Context(), "order"); err != nil {
			t.Fatal(err)
		}
		if !java.acquire(t, "order") {
			t.Fatal("Spring did not take the lock lockreg released")
		}
		mustNotAcquire(t, repo, "order", springTTL)
		if !java.delete(t, "order") {
			t.Fatal("Spring's unlock found no row of its own")
		}
		mustAcquire(t, repo, "order", springTTL)
	})
}

// Expiry is CREATED_DATE + TTL, as Spring measures it: a Spring row whose
// CREATED_DATE is more than the TTL ago is taken over, and lockreg's row
// lapses for Spring once its CREATED_DATE is.
func TestSpring6ExpiryIsMeasuredFromCreatedDate(t *testing.T) {
	spring6Interop(t, func(t *testing.T, db testDB, p *sql.DB, prefix, region string, v springVersion) {
		repo := newRepoOn(t, p, jdbc.WithPrefix(prefix), jdbc.WithRegion(region))
		java := newSpring(db, p, prefix, region, v, springTTL)
		backdate := func(key string, by time.Duration) {
			t.Helper()
			var at any = time.Now().UTC().Add(-by)
			if _, err := p.Exec(db.Q(`UPDATE `+prefix+`LOCK SET CREATED_DATE = ? WHERE REGION = ? AND LOCK_KEY = ?`),
				at, region, jdbc.UUIDKey(key)); err != nil {
				t.Fatal(err)
			}
		}
		if !java.acquire(t, "a") {
			t.Fatal("Spring did not take a free lock")
		}
		backdate("a", springTTL-2*time.Second) // not yet expired
		mustNotAcquire(t, repo, "a", springTTL)
		backdate("a", springTTL+time.Second)
		mustAcquire(t, repo, "a", springTTL)

		mustAcquire(t, repo, "b", springTTL)
		backdate("b", springTTL-2*time.Second)
		if java.acquire(t, "b") {
			t.Fatal("Spring took lockreg's lease before CREATED_DATE + TTL")
		}
		backdate("b", springTTL+time.Second)
		if !java.acquire(t, "b") {
			t.Fatal("Spring did not take lockreg's lease after CREATED_DATE + TTL")
		}
		wantLockLost(t, "Renew", repo.Renew(t.Context(), "b", springTTL))
	})
}

// Two lockreg registries and two Spring clients lock one key over and
// over: never two holders at once, and both sides take it.
func TestSpring6AndLockregNeverHoldALockTogether(t *testing.T) {
	spring6Interop(t, func(t *testing.T, db testDB, p *sql.DB, prefix, region string, v springVersion) {
		const rounds = 15
		var inside, double atomic.Int32
		var goHolds atomic.Int32
		var javas []*springClient
		enter := func() {
			if inside.Add(1) != 1 {
				double.Add(1)
			}
		}
		leave := func() { inside.Add(-1) }
		javaHolds := func() (n int32) {
			for _, j := range javas {
				n += j.acquired.Load()
			}
			return n
		}
		for range 2 {
			javas = append(javas, newSpring(db, p, prefix, region, v, springTTL))
		}
		done := func() bool { return goHolds.Load() >= rounds && javaHolds() >= rounds }
		deadline := time.Now().Add(2 * time.Minute)
		var wg sync.WaitGroup
		for i := range 2 {
			reg, err := registry.New(newRepoOn(t, p, jdbc.WithPrefix(prefix), jdbc.WithRegion(region)),
				registry.WithTTL(springTTL), registry.WithIdleBetweenTries(5*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close(context.Background()) })
			java := javas[i]
			wg.Add(2)
			go func() {
				defer wg.Done()
				for !done() && time.Now().Before(deadline) {
					l := reg.Obtain("shared")
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					ok, err := l.TryLockContext(ctx)
					cancel()
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("lockreg TryLock: %v", err)
						return
					}
					if !ok {
						continue
					}
					enter()
					goHolds.Add(1)
					leave()
					if err := l.UnlockContext(context.Background()); err != nil {
						t.Errorf("lockreg Unlock: %v", err)
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				for !done() && time.Now().Before(deadline) {
					if !java.acquire(t, "shared") {
						time.Sleep(5 * time.Millisecond) // idleBetweenTries
						continue
					}
					enter()
					leave()
					if !java.delete(t, "shared") {
						t.Error("Spring's unlock found no row of its own")
						return
					}
				}
			}()
		}
		wg.Wait()
		if n := double.Load(); n != 0 {
			t.Fatalf("%d holds overlapped another", n)
		}
		if !done() {
			t.Fatalf("lockreg held the lock %d times, Spring %d; want %d each", goHolds.Load(), javaHolds(), rounds)
		}
	})
}

// Spring 6.x binds UTC wall time whatever its JVM's zone, and lockreg uses
// the database's UTC clock whatever the session's zone: with every
// connection in another zone than UTC, they still exclude each other.
func TestSpring6AndLockregAgreeWhenTheSessionsZoneIsNotUTC(t *testing.T) {
	// SQLite has no session time zone.
	forEachDBWhere(t, func(db testDB) bool { return db.Dialect != jdbc.SQLite }, func(t *testing.T, db testDB) {
		var dsn string
		switch {
		case db.Dialect == jdbc.MySQL:
			dsn = db.DSN + "&time_zone=%27-05:00%27"
		case strings.Contains(db.DSN, "?"):
			dsn = db.DSN + "&timezone=America/New_York"
		default:
			dsn = db.DSN + "?timezone=America/New_York"
		}
		st, _, region := spring6Table(t, db)
		p := openPool(t, db.Driver, dsn)
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		repo := newRepoOn(t, p, jdbc.WithPrefix(st.prefix), jdbc.WithRegion(region))
		java := newSpring(db, p, st.prefix, region, springVersions[2], springTTL)
		if !java.acquire(t, "zoned") {
			t.Fatal("Spring did not take a free lock")
		}
		mustNotAcquire(t, repo, "zoned", springTTL)
		java.delete(t, "zoned")
		mustAcquire(t, repo, "zoned", springTTL)
		if java.acquire(t, "zoned") {
			t.Fatal("Spring took the lock lockreg holds")
		}
	})
}

// A lease longer than the table TTL would outlive what Spring grants it:
// Acquire and Renew refuse it.
func TestSpring6LeasesLongerThanTheTableTTLAreRefused(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st, p, region := spring6Table(t, db)
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		repo := newRepoOn(t, p, jdbc.WithPrefix(st.prefix), jdbc.WithRegion(region), jdbc.WithSpring6TTL(time.Minute))
		if _, _, err := repo.Acquire(t.Context(), "k", time.Minute+time.Second); !errors.Is(err, registry.ErrInvalidTTL) {
			t.Fatalf("Acquire beyond the table TTL = %v, want ErrInvalidTTL", err)
		}
		mustAcquire(t, repo, "k", time.Minute)
		if err := repo.Renew(t.Context(), "k", 2*time.Minute); !errors.Is(err, registry.ErrInvalidTTL) {
			t.Fatalf("Renew beyond the table TTL = %v, want ErrInvalidTTL", err)
		}
	})
}

// Tokens increase across lockreg's holders on a Spring 6 table, releases
// included, and a lockAtLeastFor release (tasklock) keeps the lock from
// Spring until acquisition + lockAtLeastFor.
func TestSpring6TokensIncreaseAndReleaseAfterHoldsOffSpring(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st, p, region := spring6Table(t, db)
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		a := newRepoOn(t, p, jdbc.WithPrefix(st.prefix), jdbc.WithRegion(region))
		b := newRepoOn(t, p, jdbc.WithPrefix(st.prefix), jdbc.WithRegion(region))
		var last int64
		for i := range 6 {
			r := []*jdbc.LockRepository{a, b}[i%2]
			lease, ok, err := r.Acquire(t.Context(), "t", springTTL)
			if !ok || err != nil {
				t.Fatalf("Acquire %d = %v, %v", i, ok, err)
			}
			if lease.Token <= last {
				t.Fatalf("token %d after %d", lease.Token, last)
			}
			last = lease.Token
			if err := r.Release(t.Context(), "t"); err != nil {
				t.Fatal(err)
			}
		}
		mustAcquire(t, a, "r", springTTL)
		if err := a.ReleaseAfter(t.Context(), "r", time.Hour); err != nil {
			t.Fatal(err)
		}
		if db.Dialect != jdbc.SQLite {
			java := newSpring(db, p, st.prefix, region, springVersions[2], springTTL)
			if java.acquire(t, "r") {
				t.Fatal("Spring took the lock within lockAtLeastFor")
			}
		}
		mustNotAcquire(t, b, "r", springTTL)
		mustNotAcquire(t, a, "r", springTTL)
	})
}
