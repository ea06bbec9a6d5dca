package jdbc_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

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
	st := schemaTarget{prefix: "CS" + strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", "")[:12]) + "_", dsn: db.dsn}
	if db.Dialect == jdbc.SQLite {
		st.dsn = sqliteDSN(filepath.Join(t.TempDir(), "schema.db"), 5000)
		return st
	}
	t.Cleanup(func() {
		for _, s := range []string{"GROUP_MESSAGE", "GROUP", "LOCK_WAIT", "LOCK"} {
			db.exec(t, `DROP TABLE IF EXISTS `+st.prefix+s)
		}
	})
	return st
}

// open opens a pool of its own on target, as another process would; it is
// closed when t ends.
func (st schemaTarget) open(t testing.TB, db testDB) *sql.DB {
	t.Helper()
	p := openPool(t, db.driver, st.dsn)
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
