package jdbc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// schemaTarget is a place where no lock table exists yet: a fresh prefix on
// a server, or a fresh SQLite file.
type schemaTarget struct {
	prefix, dsn string
}

// freshTarget returns a new schemaTarget on db's backend; the tables with
// its prefix are dropped when t ends.
func freshTarget(t *testing.T, db testDB) schemaTarget {
	t.Helper()
	st := schemaTarget{prefix: "CS" + strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", "")[:12]) + "_", dsn: db.DSN}
	if db.Dialect == jdbc.SQLite {
		st.dsn = testdb.SQLiteDSN(filepath.Join(t.TempDir(), "schema.db"), 5000)
		return st
	}
	t.Cleanup(func() {
		for _, s := range []string{"GROUP_MESSAGE", "GROUP", "LOCK_WAIT", "LOCK"} {
			db.Exec(t, `DROP TABLE IF EXISTS `+st.prefix+s)
		}
	})
	return st
}

// open opens a pool of its own on target, as another process would; it is
// closed when t ends.
func (st schemaTarget) open(t testing.TB, db testDB) *sql.DB {
	t.Helper()
	p := openPool(t, db.Driver, st.dsn)
	if err := p.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// Replicas starting together each call CreateSchema at once on a fresh
// database: every call succeeds, and the table they leave works.
func TestConcurrentCreateSchemaCallsAllSucceed(t *testing.T) {
	const callers, rounds = 8, 12
	forEachDB(t, func(t *testing.T, db testDB) {
		failed := 0
		for round := range rounds {
			t.Run(fmt.Sprint("round", round), func(t *testing.T) {
				st := freshTarget(t, db)
				pools := make([]*sql.DB, callers)
				for i := range pools {
					pools[i] = st.open(t, db)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				var (
					wg    sync.WaitGroup
					start = make(chan struct{})
					errs  = make([]error, callers)
				)
				for i, p := range pools {
					wg.Go(func() {
						<-start
						errs[i] = jdbc.CreateSchema(ctx, p, jdbc.WithPrefix(st.prefix))
					})
				}
				close(start)
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						failed++
						t.Errorf("caller %d of %d: %v", i, callers, err)
					}
				}
				repo := newRepoOn(t, pools[0], jdbc.WithPrefix(st.prefix), jdbc.WithRegion(randomRegion()))
				if err := repo.Check(ctx); err != nil {
					t.Fatalf("Check after the concurrent calls: %v", err)
				}
				mustAcquire(t, repo, "k", longTTL)
			})
		}
		if failed > 0 {
			t.Errorf("%d of %d calls failed", failed, callers*rounds)
		}
	})
}

// springLockDDL is Spring Integration's CREATE TABLE for INT_LOCK (with
// prefix), in its 5.x/6.x form without EXPIRED_AFTER when spring6 is true,
// else in its 7 form. SQLite, which Spring has no script for, takes the
// H2/PostgreSQL one.
func springLockDDL(d jdbc.Dialect, prefix string, spring6 bool) string {
	ts, tail := "TIMESTAMP", ""
	if d == jdbc.MySQL {
		ts, tail = "DATETIME(6)", " ENGINE=InnoDB"
	}
	expired := "EXPIRED_AFTER " + ts + " NOT NULL,\n\t"
	if spring6 {
		expired = ""
	}
	return `CREATE TABLE ` + prefix + `LOCK (
	LOCK_KEY CHAR(36) NOT NULL,
	REGION VARCHAR(100) NOT NULL,
	CLIENT_ID CHAR(36),
	CREATED_DATE ` + ts + ` NOT NULL,
	` + expired + `constraint ` + prefix + `LOCK_PK primary key (LOCK_KEY, REGION)
)` + tail
}

// spring6Table creates a Spring Integration 5.x/6.x lock table on a fresh
// target, with one row that a Spring 6 client wrote an hour ago, and
// returns the target and a pool on it.
func spring6Table(t *testing.T, db testDB) (schemaTarget, *sql.DB, string) {
	t.Helper()
	st := freshTarget(t, db)
	p := st.open(t, db)
	if _, err := p.Exec(springLockDDL(db.Dialect, st.prefix, true)); err != nil {
		t.Fatal(err)
	}
	region := randomRegion()
	var created any = time.Now().UTC().Add(-time.Hour)
	if db.Dialect == jdbc.SQLite {
		created = created.(time.Time).Format(sqliteTime)
	}
	if _, err := p.Exec(db.Q(`INSERT INTO `+st.prefix+`LOCK (REGION, LOCK_KEY, CLIENT_ID, CREATED_DATE) VALUES (?, ?, ?, ?)`),
		region, jdbc.UUIDKey("k"), uuid.NewString(), created); err != nil {
		t.Fatal(err)
	}
	return st, p, region
}

// wantSpring6Error checks that err says what the issue asks: the layout,
// that lockreg needs Spring 7's, and how to migrate; it returns the
// migration statements it gives.
func wantSpring6Error(t *testing.T, err error, table string) []string {
	t.Helper()
	if !errors.Is(err, jdbc.ErrUnsupportedLayout) {
		t.Fatalf("got %v, want an error wrapping jdbc.ErrUnsupportedLayout", err)
	}
	msg := err.Error()
	for _, want := range []string{table, "Spring Integration 5.4-6.x", "no EXPIRED_AFTER", "Spring Integration 7"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	_, migration, ok := strings.Cut(msg, "migrate it with: ")
	if !ok {
		t.Fatalf("message gives no migration: %s", msg)
	}
	migration, _, _ = strings.Cut(migration, "; then ")
	return strings.Split(migration, "; ")
}

// WithLayout(LayoutSpring7) on an INT_LOCK of Spring Integration 5.4-6.x,
// which lacks EXPIRED_AFTER: CreateSchema refuses it, saying so and how to
// migrate it, and leaves it as it is.
func TestCreateSchemaWithLayoutSpring7RefusesASpring6LockTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st, p, _ := spring6Table(t, db)
		err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix), jdbc.WithLayout(jdbc.LayoutSpring7))
		if stmts := wantSpring6Error(t, err, st.prefix+"LOCK"); len(stmts) == 0 {
			t.Error("no migration statement")
		}
		if _, err := p.Exec(`SELECT FENCE FROM ` + st.prefix + `LOCK`); err == nil {
			t.Error("CreateSchema added FENCE to the table it refused")
		}
	})
}

// NewLockRepository with WithLayout(LayoutSpring7), which checks the
// table, refuses a Spring Integration 5.4-6.x INT_LOCK in the same words,
// instead of every acquire failing.
func TestNewLockRepositoryWithLayoutSpring7RefusesASpring6LockTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st, p, _ := spring6Table(t, db)
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		repo, err := jdbc.NewLockRepository(t.Context(), p, jdbc.WithPrefix(st.prefix), jdbc.WithLayout(jdbc.LayoutSpring7))
		if repo != nil {
			repo.Close(t.Context())
		}
		wantSpring6Error(t, err, st.prefix+"LOCK")
	})
}

// The statements the error gives migrate the Spring 6 table, rows and all,
// so that CreateSchema then completes it and locks work on it.
func TestTheMigrationThatTheSpring6ErrorGivesWorks(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st, p, region := spring6Table(t, db)
		spring7 := jdbc.WithLayout(jdbc.LayoutSpring7)
		stmts := wantSpring6Error(t, jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix), spring7), st.prefix+"LOCK")
		for _, s := range stmts {
			if _, err := p.Exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix), spring7); err != nil {
			t.Fatalf("CreateSchema after the migration: %v", err)
		}
		repo := newRepoOn(t, p, jdbc.WithPrefix(st.prefix), jdbc.WithRegion(region), spring7)
		if err := repo.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, repo, "k", longTTL) // the Spring 6 row is expired
		other := newRepoOn(t, p, jdbc.WithPrefix(st.prefix), jdbc.WithRegion(region))
		mustNotAcquire(t, other, "k", longTTL)
	})
}

// On a Spring Integration 5.4-6.x INT_LOCK, CreateSchema adds lockreg's
// FENCE, with a default, and nothing else: no EXPIRED_AFTER, no waiter
// queue; Spring's row stays.
func TestCreateSchemaAddsOnlyFenceToASpring6LockTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st, p, region := spring6Table(t, db)
		for range 2 {
			if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
				t.Fatal(err)
			}
		}
		var fence int64
		if err := p.QueryRow(db.Q(`SELECT FENCE FROM `+st.prefix+`LOCK WHERE REGION = ?`), region).Scan(&fence); err != nil || fence != 0 {
			t.Fatalf("FENCE of Spring's row = %d, %v; want the default 0", fence, err)
		}
		for _, q := range []string{`SELECT EXPIRED_AFTER FROM ` + st.prefix + `LOCK`, `SELECT 1 FROM ` + st.prefix + `LOCK_WAIT`} {
			if _, err := p.Exec(q); err == nil {
				t.Errorf("%s: succeeds; CreateSchema changed the Spring 6 layout", q)
			}
		}
		if l := newRepoOn(t, p, jdbc.WithPrefix(st.prefix)).Layout(); l != jdbc.LayoutSpring6 {
			t.Fatalf("Layout() = %q, want %q", l, jdbc.LayoutSpring6)
		}
	})
}

// NewLockRepository refuses a Spring Integration 5.4-6.x INT_LOCK without
// FENCE, naming the column and CreateSchema, instead of every acquire
// failing.
func TestNewLockRepositoryRefusesASpring6LockTableWithoutFence(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st, p, _ := spring6Table(t, db)
		_, err := jdbc.NewLockRepository(t.Context(), p, jdbc.WithPrefix(st.prefix))
		if !errors.Is(err, jdbc.ErrUnsupportedLayout) {
			t.Fatalf("got %v, want an error wrapping jdbc.ErrUnsupportedLayout", err)
		}
		for _, want := range []string{st.prefix + "LOCK", "Spring Integration 5.4-6.x", "FENCE", "jdbc.CreateSchema"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message lacks %q: %v", want, err)
			}
		}
	})
}

// WithLayout(LayoutSpring6) on an empty database: CreateSchema creates
// Spring 5.4-6.x's table with FENCE, which is then detected.
func TestCreateSchemaWithLayoutSpring6CreatesASpring6Table(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st := freshTarget(t, db)
		p := st.open(t, db)
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix), jdbc.WithLayout(jdbc.LayoutSpring6)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Exec(`SELECT LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, FENCE FROM ` + st.prefix + `LOCK`); err != nil {
			t.Fatal(err)
		}
		repo := newRepoOn(t, p, jdbc.WithPrefix(st.prefix))
		if repo.Layout() != jdbc.LayoutSpring6 {
			t.Fatalf("Layout() = %q, want %q", repo.Layout(), jdbc.LayoutSpring6)
		}
		mustAcquire(t, repo, "k", 5*time.Second)
	})
}

// WithLayout(LayoutSpring6) on a Spring 7 table is refused.
func TestWithLayoutSpring6RefusesASpring7Table(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		_, err := jdbc.NewLockRepository(t.Context(), db.DB, jdbc.WithLayout(jdbc.LayoutSpring6))
		if !errors.Is(err, jdbc.ErrUnsupportedLayout) || !strings.Contains(err.Error(), "Spring Integration 7's layout") {
			t.Fatalf("got %v, want an error wrapping jdbc.ErrUnsupportedLayout naming Spring 7's layout", err)
		}
	})
}

// A missing table is given Spring 7's layout, the default for new tables.
func TestAMissingTableIsGivenSpring7sLayout(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st := freshTarget(t, db)
		if l := newRepoOn(t, st.open(t, db), jdbc.WithPrefix(st.prefix)).Layout(); l != jdbc.LayoutSpring7 {
			t.Fatalf("Layout() = %q, want %q", l, jdbc.LayoutSpring7)
		}
	})
}

// A Spring Integration 7 INT_LOCK lacks only lockreg's FENCE: CreateSchema
// adds it, keeping Spring's rows, and locks work on the table.
func TestCreateSchemaCompletesASpring7LockTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st := freshTarget(t, db)
		p := st.open(t, db)
		if _, err := p.Exec(springLockDDL(db.Dialect, st.prefix, false)); err != nil {
			t.Fatal(err)
		}
		region := randomRegion()
		db.DB = p // insertSpringRow writes to the target
		now := time.Now()
		db.InsertSpringRow(t, st.prefix+"LOCK", region, jdbc.UUIDKey("spring"), "a-spring-client", now, now.Add(time.Hour))
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		repo := newRepoOn(t, p, jdbc.WithPrefix(st.prefix), jdbc.WithRegion(region))
		mustNotAcquire(t, repo, "spring", longTTL) // Spring's lease stands
		mustAcquire(t, repo, "k", longTTL)
	})
}

// NewLockRepository refuses a Spring Integration 7 INT_LOCK that lacks
// FENCE, naming the column and CreateSchema, instead of every acquire
// failing.
func TestNewLockRepositoryRefusesASpring7LockTableWithoutFence(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st := freshTarget(t, db)
		p := st.open(t, db)
		if _, err := p.Exec(springLockDDL(db.Dialect, st.prefix, false)); err != nil {
			t.Fatal(err)
		}
		_, err := jdbc.NewLockRepository(t.Context(), p, jdbc.WithPrefix(st.prefix))
		if !errors.Is(err, jdbc.ErrUnsupportedLayout) {
			t.Fatalf("got %v, want an error wrapping jdbc.ErrUnsupportedLayout", err)
		}
		for _, want := range []string{st.prefix + "LOCK", "Spring Integration 7", "FENCE", "jdbc.CreateSchema"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message lacks %q: %v", want, err)
			}
		}
	})
}

// A table of the lock table's name that is no Spring lock table is refused
// by CreateSchema and NewLockRepository, naming the columns it lacks.
func TestATableThatIsNoLockTableIsRefused(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st := freshTarget(t, db)
		p := st.open(t, db)
		if _, err := p.Exec(`CREATE TABLE ` + st.prefix + `LOCK (ID INTEGER PRIMARY KEY, REGION VARCHAR(100))`); err != nil {
			t.Fatal(err)
		}
		_, newErr := jdbc.NewLockRepository(t.Context(), p, jdbc.WithPrefix(st.prefix))
		for name, err := range map[string]error{
			"CreateSchema":      jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)),
			"NewLockRepository": newErr,
		} {
			if !errors.Is(err, jdbc.ErrUnsupportedLayout) {
				t.Errorf("%s: got %v, want an error wrapping jdbc.ErrUnsupportedLayout", name, err)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "LOCK_KEY, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER, FENCE") {
				t.Errorf("%s: message does not name the missing columns: %s", name, msg)
			}
		}
	})
}

// A replica starting while others lock and release: CreateSchema on tables
// that are complete takes no lock on them, so it neither waits behind nor
// deadlocks with the lock statements of live traffic (on PostgreSQL, ADD
// COLUMN IF NOT EXISTS locked the lock table exclusively until the schema
// transaction ended, and a release, which locks the queue first, deadlocked
// with it). Here a transaction holds the lock table in ROW EXCLUSIVE mode,
// as any acquire does, while CreateSchema runs.
func TestCreateSchemaOnCompleteTablesWaitsForNoLockTraffic(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.Dialect != jdbc.Postgres {
			t.Skip("requires PostgreSQL's table-level lock modes") // the others need no such lock to skip
		}
		st := freshTarget(t, db)
		p := st.open(t, db)
		ctx := context.Background()
		if err := jdbc.CreateSchema(ctx, p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		tx, err := p.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for _, table := range []string{"LOCK", "LOCK_WAIT"} {
			if _, err := tx.ExecContext(ctx, `LOCK TABLE `+st.prefix+table+` IN ROW EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := jdbc.CreateSchema(cctx, st.open(t, db), jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatalf("CreateSchema beside a transaction writing the lock table: %v", err)
		}
	})
}

// A lock table of a lockreg before 000004 (Spring 7's columns and FENCE):
// NewLockRepository names the readable columns it lacks, and CreateSchema
// adds them, keeping the rows.
func TestCreateSchemaAddsTheReadableColumnsToAnEarlierLockregTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		st := freshTarget(t, db)
		p := st.open(t, db)
		if _, err := p.Exec(springLockDDL(db.Dialect, st.prefix, false)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Exec(`ALTER TABLE ` + st.prefix + `LOCK ADD FENCE BIGINT NOT NULL DEFAULT 0`); err != nil {
			t.Fatal(err)
		}
		_, err := jdbc.NewLockRepository(t.Context(), p, jdbc.WithPrefix(st.prefix))
		if !errors.Is(err, jdbc.ErrUnsupportedLayout) || !strings.Contains(err.Error(), "LOCK_NAME, HOLDER") ||
			strings.Contains(err.Error(), "FENCE") {
			t.Fatalf("got %v, want ErrUnsupportedLayout naming LOCK_NAME and HOLDER only", err)
		}
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		repo := newRepoOn(t, p, jdbc.WithPrefix(st.prefix))
		mustAcquire(t, repo, "k", longTTL)
		var name, holder string
		if err := p.QueryRow(`SELECT LOCK_NAME, HOLDER FROM `+st.prefix+`LOCK`).Scan(&name, &holder); err != nil {
			t.Fatal(err)
		}
		if name != "k" || holder != repo.Holder() {
			t.Errorf("LOCK_NAME %q, HOLDER %q; want %q, %q", name, holder, "k", repo.Holder())
		}
	})
}

// A PostgreSQL lock table of a lockreg before 000005 (every column but the
// has-waiters flag): NewLockRepository names the column, the script that
// adds it and CreateSchema, and CreateSchema adds it, keeping the rows.
func TestCreateSchemaAddsTheWaitersFlagToAnEarlierLockregTableOnPostgres(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.Dialect != jdbc.Postgres {
			t.Skip("requires PostgreSQL: the flag belongs to its waiter queue")
		}
		st := freshTarget(t, db)
		p := st.open(t, db)
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Exec(`ALTER TABLE ` + st.prefix + `LOCK DROP COLUMN QUEUED_UNTIL`); err != nil {
			t.Fatal(err)
		}
		_, err := jdbc.NewLockRepository(t.Context(), p, jdbc.WithPrefix(st.prefix))
		if !errors.Is(err, jdbc.ErrUnsupportedLayout) || !strings.Contains(err.Error(), "QUEUED_UNTIL") ||
			!strings.Contains(err.Error(), "000005_lock_queued") || !strings.Contains(err.Error(), "CreateSchema") {
			t.Fatalf("got %v, want ErrUnsupportedLayout naming QUEUED_UNTIL, 000005_lock_queued and CreateSchema", err)
		}
		if err := jdbc.CreateSchema(t.Context(), p, jdbc.WithPrefix(st.prefix)); err != nil {
			t.Fatal(err)
		}
		repo := newRepoOn(t, p, jdbc.WithPrefix(st.prefix))
		mustAcquire(t, repo, "k", longTTL)
		if err := repo.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
