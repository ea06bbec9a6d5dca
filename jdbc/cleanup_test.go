package jdbc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// spyDB is a database that records what the clean-up sends through it: the
// rows each DELETE affected, and the acquisitions of its lease.
// Prepared statements (the lock operations') and transactions (the group
// store's) pass unseen.
type spyDB struct {
	*sql.DB
	leaseKey string

	mu         sync.Mutex
	deletes    map[string][]int64 // rows affected per DELETE, by target table
	leaseTries int
}

func newSpy(db *sql.DB, leaseKey string) *spyDB {
	return &spyDB{DB: db, leaseKey: leaseKey, deletes: map[string][]int64{}}
}

// noteLease counts the acquisitions (not the renewals) of the lease.
func (s *spyDB) noteLease(query string, args []any) {
	if !strings.HasPrefix(query, "INSERT") {
		return
	}
	for _, a := range args {
		if a == s.leaseKey {
			s.mu.Lock()
			s.leaseTries++
			s.mu.Unlock()
			return
		}
	}
}

func (s *spyDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s.noteLease(query, args)
	res, err := s.DB.ExecContext(ctx, query, args...)
	if f := strings.Fields(query); err == nil && len(f) > 2 && f[0] == "DELETE" {
		if n, err := res.RowsAffected(); err == nil {
			s.mu.Lock()
			s.deletes[f[2]] = append(s.deletes[f[2]], n)
			s.mu.Unlock()
		}
	}
	return res, err
}

func (s *spyDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	s.noteLease(query, args)
	return s.DB.QueryRowContext(ctx, query, args...)
}

// deleted returns the rows each DELETE from table affected.
func (s *spyDB) deleted(table string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.deletes[table]...)
}

func (s *spyDB) tries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaseTries
}

// wantBatched fails t unless the DELETEs from table removed want rows in
// all, none more than 1000.
func wantBatched(t *testing.T, spy *spyDB, table string, want int64) {
	t.Helper()
	var sum int64
	counts := spy.deleted(table)
	for _, n := range counts {
		sum += n
		if n > 1000 {
			t.Errorf("a DELETE from %s removed %d rows; want at most 1000 per statement", table, n)
		}
	}
	if sum != want {
		t.Errorf("the DELETEs from %s removed %d rows in all (%v); want %d", table, sum, counts, want)
	}
}

// nextPass waits until a whole clean-up pass has run since it was called:
// passes run one after the other, so once two more have begun, the first
// of them has ended. (A pass in flight may end early, when its lease
// lapses between batches.)
func (s *spyDB) nextPass(t testing.TB) {
	t.Helper()
	n := s.tries()
	waitFor(t, "a whole clean-up pass", func() bool { return s.tries() >= n+2 })
}

// lockLease and groupLease are the LOCK_KEYs of the clean-up's leases.
var (
	lockLease  = jdbc.UUIDKey("lockreg cleanup " + table)
	groupLease = jdbc.UUIDKey("lockreg cleanup INT_GROUP")
)

// waitFor polls cond until it holds, failing t after two minutes (the
// SQLite clean-up of the large tests is slow under -race on busy cores).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // a poll on SQLite scans the tables
	}
}

// now returns the database's clock as UTC wall time.
func (db testDB) now(t testing.TB) time.Time {
	t.Helper()
	query := map[jdbc.Dialect]string{
		jdbc.Postgres: `SELECT CAST(timezone('UTC', now()) AS TEXT)`,
		jdbc.MySQL:    `SELECT CAST(UTC_TIMESTAMP(6) AS CHAR)`,
		jdbc.SQLite:   `SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')`,
	}[db.Dialect]
	var s string
	if err := db.DB.QueryRowContext(context.Background(), query).Scan(&s); err != nil {
		t.Fatal(err)
	}
	now, err := time.Parse("2006-01-02 15:04:05.999999999", s)
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// at converts a time to a parameter of db's time columns.
func (db testDB) at(t time.Time) any {
	if db.Dialect == jdbc.SQLite {
		return t.UTC().Format(sqliteTime)
	}
	return t.UTC()
}

// insertRows inserts rows into table's columns, 200 rows per statement.
func (db testDB) insertRows(t testing.TB, table string, columns []string, rows [][]any) {
	t.Helper()
	one := "(?" + strings.Repeat(", ?", len(columns)-1) + ")"
	for len(rows) > 0 {
		n := min(len(rows), 200)
		var args []any
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		db.exec(t, `INSERT INTO `+table+` (`+strings.Join(columns, ", ")+`) VALUES `+one+strings.Repeat(", "+one, n-1), args...)
		rows = rows[n:]
	}
}

var lockColumns = []string{"LOCK_KEY", "REGION", "CLIENT_ID", "CREATED_DATE", "EXPIRED_AFTER", "FENCE"}

// lockRows returns n rows of keys prefix-0, prefix-1, ... in region that
// expire at expires, acquired an hour before with the token of that time.
func (db testDB) lockRows(prefix, region string, n int, expires time.Time) [][]any {
	rows := make([][]any, n)
	for i := range rows {
		acquired := expires.Add(-time.Hour)
		rows[i] = []any{fmt.Sprintf("%s-%d", prefix, i), region, "some-client", db.at(acquired), db.at(expires), acquired.UnixMicro()}
	}
	return rows
}

// countRows counts the rows of table in region whose key column starts
// with prefix.
func (db testDB) countRows(t testing.TB, table, keyColumn, region, prefix string) int {
	t.Helper()
	var n int
	err := db.DB.QueryRowContext(context.Background(),
		db.q(`SELECT COUNT(*) FROM `+table+` WHERE REGION = ? AND `+keyColumn+` LIKE ?`), region, prefix+"%").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func identity(k string) string { return k }

func TestCleanupLeavesOnlyLiveLockRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, other := randomRegion(), randomRegion()
		now := db.now(t)
		db.insertRows(t, table, lockColumns, db.lockRows("dead", region, 5000, now.Add(-2*time.Hour)))
		db.insertRows(t, table, lockColumns, db.lockRows("recent", region, 300, now.Add(-time.Minute)))
		db.insertRows(t, table, lockColumns, db.lockRows("held", region, 200, now.Add(time.Hour)))
		db.insertRows(t, table, lockColumns, db.lockRows("dead", other, 100, now.Add(-2*time.Hour)))

		spy := newSpy(db.DB, lockLease)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Hour, 20*time.Millisecond))
		for i := range 50 {
			mustAcquire(t, repo, fmt.Sprintf("mine-%d", i), longTTL)
		}
		waitFor(t, "the clean-up of the dead rows", func() bool { return db.countRows(t, table, "LOCK_KEY", region, "dead") == 0 })
		spy.nextPass(t)

		for _, c := range []struct {
			region, prefix string
			want           int
		}{{region, "recent", 300}, {region, "held", 200}, {region, "mine", 50}, {other, "dead", 100}} {
			if n := db.countRows(t, table, "LOCK_KEY", c.region, c.prefix); n != c.want {
				t.Errorf("%d rows %s-* left in their region; want %d", n, c.prefix, c.want)
			}
		}
		wantBatched(t, spy, table, 5000)
	})
}

func TestCleanupKeepsTokensIncreasing(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Millisecond, 10*time.Millisecond))
		ctx := context.Background()
		first, ok, err := repo.Acquire(ctx, "k", longTTL)
		if err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		if err := repo.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the clean-up of the released row", func() bool {
			_, found := db.leaseOf(t, table, region, "k")
			return !found
		})
		next, ok, err := repo.Acquire(ctx, "k", longTTL)
		if err != nil || !ok {
			t.Fatalf("Acquire after the clean-up = %v, %v", ok, err)
		}
		if next.Token <= first.Token {
			t.Errorf("the token after the clean-up deleted the row is %d; want more than %d", next.Token, first.Token)
		}
	})
}

// A row whose token ran ahead of the database's clock (the clock stepped
// back) must stay, or the next token, taken from the clock, would be smaller.
func TestCleanupSparesARowWhoseTokenIsAheadOfTheClock(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		now := db.now(t)
		ahead := now.Add(time.Hour).UnixMicro()
		db.insertRows(t, table, lockColumns, db.lockRows("dead", region, 3, now.Add(-2*time.Hour)))
		db.insertRows(t, table, lockColumns, [][]any{{"ahead", region, "some-client", db.at(now.Add(-2 * time.Hour)),
			db.at(now.Add(-2 * time.Hour)), ahead}})
		spy := newSpy(db.DB, lockLease)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Minute, 10*time.Millisecond))
		mustAcquire(t, repo, "start", longTTL)
		waitFor(t, "the clean-up of the dead rows", func() bool { return db.countRows(t, table, "LOCK_KEY", region, "dead") == 0 })
		spy.nextPass(t)

		if _, found := db.leaseOf(t, table, region, "ahead"); !found {
			t.Fatal("the clean-up deleted the row whose token is ahead of the clock")
		}
		lease, ok, err := repo.Acquire(context.Background(), "ahead", longTTL)
		if err != nil || !ok {
			t.Fatalf("Acquire = %v, %v", ok, err)
		}
		if lease.Token <= ahead {
			t.Errorf("token %d; want more than the row's %d", lease.Token, ahead)
		}
	})
}

func TestCleanupSkipsWhileAnotherRepositoryHoldsItsLease(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		now := db.now(t)
		leaseKey := lockLease
		db.insertRows(t, table, lockColumns, db.lockRows("dead", region, 100, now.Add(-2*time.Hour)))
		db.insertRows(t, table, lockColumns, [][]any{{leaseKey, region, "other-instance", db.at(now), db.at(now.Add(time.Hour)), now.UnixMicro()}})

		spy := newSpy(db.DB, leaseKey)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithKeyMapping(identity),
			jdbc.WithCleanup(time.Minute, 10*time.Millisecond))
		mustAcquire(t, repo, "start", longTTL)
		waitFor(t, "three tries of the clean-up's lease", func() bool { return spy.tries() >= 3 })
		if d := spy.deleted(table); len(d) > 0 {
			t.Fatalf("the clean-up deleted rows (%v) while another instance held its lease", d)
		}

		db.exec(t, `DELETE FROM `+table+` WHERE REGION = ? AND LOCK_KEY = ?`, region, leaseKey)
		waitFor(t, "the clean-up once the lease is free", func() bool { return db.countRows(t, table, "LOCK_KEY", region, "dead") == 0 })
	})
}

func TestRepositoryCloseStopsTheCleanup(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		before := goleak.IgnoreCurrent()
		spy := newSpy(db.DB, lockLease)
		repo, err := jdbc.NewLockRepository(context.Background(), spy, jdbc.WithRegion(randomRegion()),
			jdbc.WithCleanup(time.Minute, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, repo, "k", longTTL)
		waitFor(t, "a clean-up pass", func() bool { return spy.tries() > 0 })
		if err := repo.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, before, connectionWatcher)
	})
}

// connectionWatcher is go-sql-driver/mysql's goroutine of an open
// connection, which lives with the pool, not with the repository.
var connectionWatcher = goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1")

func TestCleanupOptionsMustBePositive(t *testing.T) {
	var db testDB // SQLite's: the options are checked before any I/O
	for _, b := range backends {
		if b.dialect == jdbc.SQLite {
			db = openBackend(t, b)
		}
	}
	for name, opt := range map[string]jdbc.Option{
		"WithCleanup(0, 1m)":         jdbc.WithCleanup(0, time.Minute),
		"WithCleanup(1h, 0)":         jdbc.WithCleanup(time.Hour, 0),
		"WithGroupCleanup(-1s, 1m)":  jdbc.WithGroupCleanup(-time.Second, time.Minute),
		"WithGroupCleanup(1h, -1ns)": jdbc.WithGroupCleanup(time.Hour, -1),
	} {
		if _, err := jdbc.NewLockRepository(context.Background(), db.DB, opt); !errors.Is(err, jdbc.ErrInvalidOption) {
			t.Errorf("NewLockRepository(%s): %v; want ErrInvalidOption", name, err)
		}
		if _, err := jdbc.NewGroupStore(db.DB, opt); !errors.Is(err, jdbc.ErrInvalidOption) {
			t.Errorf("NewGroupStore(%s): %v; want ErrInvalidOption", name, err)
		}
	}
}

var (
	groupColumns = []string{"GROUP_KEY", "REGION", "CORRELATION_KEY", "GROUP_ID", "COMPLETE", "LAST_RELEASED_SEQUENCE",
		"RELEASES", "MESSAGE_COUNT", "LAST_POSITION", "VERSION", "DUE_AT", "CLAIMED_UNTIL", "CREATED_DATE", "UPDATED_DATE"}
	messageColumns = []string{"GROUP_KEY", "REGION", "MESSAGE_KEY", "MESSAGE_ID", "POSITION", "RELEASED", "METADATA",
		"PAYLOAD", "CREATED_DATE"}
)

// groupRows is a set of groups to insert with their message rows.
type groupRows struct{ groups, messages [][]any }

// add appends n groups prefix-0, prefix-1, ... in region that last changed
// at updated, each with messages message rows of which unreleased are not
// released, complete or not, due at due (nil for no due time).
func (r *groupRows) add(db testDB, prefix, region string, n int, complete bool, messages, unreleased int, due any, updated time.Time) {
	c := 0
	if complete {
		c = 1
	}
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		r.groups = append(r.groups, []any{key, region, key, key, c, 0, 1, unreleased, messages, 3, due, nil,
			db.at(updated.Add(-time.Minute)), db.at(updated)})
		for j := range messages {
			released := 1
			if j < unreleased {
				released = 0
			}
			r.messages = append(r.messages, []any{key, region, fmt.Sprintf("m-%d", j), fmt.Sprintf("%s-m%d", key, j), j + 1,
				released, nil, nil, db.at(updated.Add(-time.Minute))})
		}
	}
}

func TestGroupCleanupLeavesOnlyLiveGroups(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region, other := randomRegion(), randomRegion()
		now := db.now(t)
		old := now.Add(-2 * time.Hour)
		var rows groupRows
		rows.add(db, "done", region, 2000, true, 2, 0, nil, old)
		rows.add(db, "open", region, 100, false, 2, 2, nil, old)
		rows.add(db, "drained", region, 50, false, 2, 0, nil, old) // open, all released so far (a resequencer's)
		rows.add(db, "due", region, 50, true, 2, 0, db.at(now.Add(time.Hour)), old)
		rows.add(db, "overdue", region, 50, true, 2, 0, db.at(old), old)
		rows.add(db, "unreleased", region, 50, true, 2, 1, nil, old)
		rows.add(db, "recent", region, 100, true, 2, 0, nil, now.Add(-time.Minute))
		rows.add(db, "done", other, 50, true, 2, 0, nil, old)
		db.insertRows(t, "INT_GROUP", groupColumns, rows.groups)
		db.insertRows(t, "INT_GROUP_MESSAGE", messageColumns, rows.messages)

		spy := newSpy(db.DB, groupLease)
		store, err := jdbc.NewGroupStore(spy, jdbc.WithRegion(region), jdbc.WithGroupCleanup(time.Hour, 20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(context.Background()) })
		// A group completed through the API, within the retention.
		ctx := context.Background()
		for _, id := range []string{"a", "b"} {
			if _, _, err := store.Add(ctx, "completed", groupstore.Message{UUID: id}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Update(ctx, "completed", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the clean-up of the finished groups", func() bool {
			return db.countRows(t, "INT_GROUP", "GROUP_KEY", region, "done") == 0 &&
				db.countRows(t, "INT_GROUP_MESSAGE", "GROUP_KEY", region, "done") == 0
		})
		spy.nextPass(t)

		for _, c := range []struct {
			region, prefix   string
			groups, messages int
		}{
			{region, "open", 100, 200}, {region, "drained", 50, 100}, {region, "due", 50, 100}, {region, "overdue", 50, 100},
			{region, "unreleased", 50, 100}, {region, "recent", 100, 200}, {other, "done", 50, 100},
		} {
			if n := db.countRows(t, "INT_GROUP", "GROUP_KEY", c.region, c.prefix); n != c.groups {
				t.Errorf("%d groups %s-* left; want %d", n, c.prefix, c.groups)
			}
			if n := db.countRows(t, "INT_GROUP_MESSAGE", "GROUP_KEY", c.region, c.prefix); n != c.messages {
				t.Errorf("%d message rows of groups %s-* left; want %d", n, c.prefix, c.messages)
			}
		}
		if _, outcome, err := store.Add(ctx, "completed", groupstore.Message{UUID: "a"}, 0); err != nil || outcome != groupstore.Duplicate {
			t.Errorf("a redelivery to the group completed within the retention: %v, %v; want %v", outcome, err, groupstore.Duplicate)
		}
		wantBatched(t, spy, "INT_GROUP", 2000)
		wantBatched(t, spy, "INT_GROUP_MESSAGE", 4000)
	})
}

// After the retention a completed group is forgotten: a redelivery of one
// of its messages starts a new group. This is the documented trade-off.
func TestGroupCleanupForgetsAGroupAfterTheRetention(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		store, err := jdbc.NewGroupStore(db.DB, jdbc.WithRegion(region), jdbc.WithGroupCleanup(time.Second, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(context.Background()) })
		ctx := context.Background()
		if _, _, err := store.Add(ctx, "g", groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatal(err)
		}
		if err := store.Update(ctx, "g", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the clean-up of the completed group", func() bool {
			_, err := store.Get(ctx, "g")
			return errors.Is(err, groupstore.ErrNotFound)
		})
		if n := db.countRows(t, "INT_GROUP_MESSAGE", "GROUP_KEY", region, ""); n != 0 {
			t.Errorf("%d message rows left after their group was deleted; want 0", n)
		}
		if _, outcome, err := store.Add(ctx, "g", groupstore.Message{UUID: "m"}, 0); err != nil || outcome != groupstore.Added {
			t.Errorf("the message again after the retention: %v, %v; want %v", outcome, err, groupstore.Added)
		}
	})
}

func TestDeleteCompletedDeletesOnlyFinishedGroups(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		store := newGroupStore(t, db, jdbc.WithoutCleanup())
		ctx := context.Background()
		for _, key := range []string{"open", "done"} {
			if _, _, err := store.Add(ctx, key, groupstore.Message{UUID: "m"}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Update(ctx, "done", groupstore.Update{ReleaseAll: true, Complete: true}); err != nil {
			t.Fatal(err)
		}
		if n, err := store.DeleteCompleted(ctx, 0); err != nil || n != 1 {
			t.Fatalf("DeleteCompleted = %d, %v; want 1, nil", n, err)
		}
		if _, err := store.Get(ctx, "open"); err != nil {
			t.Errorf("the open group: %v", err)
		}
		if _, err := store.Get(ctx, "done"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Errorf("the completed group: %v; want ErrNotFound", err)
		}
	})
}

func TestGroupStoreCloseStopsTheCleanup(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		before := goleak.IgnoreCurrent()
		spy := newSpy(db.DB, groupLease)
		store, err := jdbc.NewGroupStore(spy, jdbc.WithRegion(randomRegion()), jdbc.WithGroupCleanup(time.Minute, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Add(context.Background(), "g", groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a clean-up pass", func() bool { return spy.tries() > 0 })
		if err := store.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, before, connectionWatcher)
	})
}

func TestCleanupDeletesLapsedPlacesInTheQueue(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.Dialect != jdbc.Postgres {
			t.Skip("only PostgreSQL queues waiters")
		}
		region := randomRegion()
		now := db.now(t)
		var rows [][]any
		for i := range 1500 {
			rows = append(rows, []any{fmt.Sprintf("lapsed-%d", i), region, "gone-client", db.at(now.Add(-time.Hour)), db.at(now.Add(-time.Minute)), 1000})
		}
		for i := range 50 {
			rows = append(rows, []any{fmt.Sprintf("waiting-%d", i), region, "some-client", db.at(now), db.at(now.Add(time.Hour)), 1000})
		}
		db.insertRows(t, "INT_LOCK_WAIT", []string{"LOCK_KEY", "REGION", "CLIENT_ID", "WAITING_SINCE", "WAITING_UNTIL", "LEASE_MICROS"}, rows)

		spy := newSpy(db.DB, lockLease)
		repo := newRepoOn(t, spy, jdbc.WithRegion(region), jdbc.WithCleanup(time.Hour, 10*time.Millisecond))
		mustAcquire(t, repo, "start", longTTL)
		waitFor(t, "the clean-up of the lapsed places", func() bool {
			return db.countRows(t, "INT_LOCK_WAIT", "LOCK_KEY", region, "lapsed") == 0
		})
		spy.nextPass(t)
		if n := db.countRows(t, "INT_LOCK_WAIT", "LOCK_KEY", region, "waiting"); n != 50 {
			t.Errorf("%d live places left; want 50", n)
		}
		wantBatched(t, spy, "INT_LOCK_WAIT", 1500)
	})
}

func TestCleanupReportsFailuresToTheErrorHandler(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		var (
			mu   sync.Mutex
			errs []error
		)
		repo := newRepo(t, db, jdbc.WithPrefix("MISSING_"), jdbc.WithCleanup(time.Hour, 10*time.Millisecond),
			jdbc.WithErrorHandler(func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}))
		if _, _, err := repo.Acquire(context.Background(), "k", longTTL); !errors.Is(err, jdbc.ErrNoTable) {
			t.Fatalf("Acquire: %v; want ErrNoTable", err)
		}
		waitFor(t, "a clean-up failure", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(errs) > 0
		})
		mu.Lock()
		err := errs[0]
		mu.Unlock()
		if !errors.Is(err, jdbc.ErrNoTable) || !strings.Contains(err.Error(), "MISSING_LOCK") {
			t.Errorf("the clean-up reported %v; want ErrNoTable naming MISSING_LOCK", err)
		}
	})
}

func TestRegistryCloseStopsTheCleanup(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		before := goleak.IgnoreCurrent()
		spy := newSpy(db.DB, lockLease)
		repo, err := jdbc.NewLockRepository(context.Background(), spy, jdbc.WithRegion(randomRegion()),
			jdbc.WithCleanup(time.Minute, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		locks, err := registry.New(repo)
		if err != nil {
			t.Fatal(err)
		}
		l := locks.Obtain("k")
		if err := l.LockContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a clean-up pass", func() bool { return spy.tries() > 0 })
		if err := l.UnlockContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := locks.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, before, connectionWatcher)
	})
}

func TestWithoutCleanupStartsNoGoroutine(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		before := goleak.IgnoreCurrent()
		repo := newRepo(t, db, jdbc.WithoutCleanup())
		mustAcquire(t, repo, "k", longTTL)
		store := newGroupStore(t, db, jdbc.WithoutCleanup())
		if _, _, err := store.Add(context.Background(), "g", groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, before, connectionWatcher)
	})
}

func TestWithCleanupAfterWithoutCleanupTurnsItOn(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		db.insertRows(t, table, lockColumns, db.lockRows("dead", region, 3, db.now(t).Add(-2*time.Hour)))
		repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithoutCleanup(), jdbc.WithCleanup(time.Minute, 10*time.Millisecond))
		mustAcquire(t, repo, "k", longTTL)
		waitFor(t, "the clean-up of the dead rows", func() bool { return db.countRows(t, table, "LOCK_KEY", region, "dead") == 0 })
	})
}
