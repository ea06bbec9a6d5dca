package jdbc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// The repository names its backend, region and client for the registry's
// metrics, spans and logs.
func TestDescribeNamesBackendRegionAndClient(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		repo := newRepo(t, db, jdbc.WithRegion("described"), jdbc.WithClientID("client-1"))
		want := map[jdbc.Dialect]string{jdbc.Postgres: "postgresql", jdbc.MySQL: "mysql", jdbc.SQLite: "sqlite"}[db.Dialect]
		if d := repo.Describe(); d != (registry.Description{Backend: want, Region: "described", Client: "client-1"}) {
			t.Fatalf("Describe() = %+v", d)
		}
	})
}

// A registry on a repository counts its acquisitions under the
// repository's backend, and the repository records its statements.
func TestMetricsOfALockCycleNameTheBackendAndTheStatements(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		m := telemetrytest.NewMetrics()
		repo := newRepo(t, db, jdbc.WithMeterProvider(m.Provider))
		r, err := registry.New(repo, registry.WithMeterProvider(m.Provider))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		l := r.Obtain("k")
		if err := l.LockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := l.UnlockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		backend := tel.Backend.String(repo.Describe().Backend)
		if n := m.Sum(t, "lockreg.lock.acquisitions", backend, tel.Outcome.String("acquired")); n != 1 {
			t.Errorf("%d acquisitions on %s, want 1", n, backend.Value.AsString())
		}
		if n := m.Count(t, "lockreg.jdbc.statement.duration", backend, tel.Operation.String("release"),
			tel.Outcome.String("ok")); n != 1 {
			t.Errorf("%d release statements recorded, want 1", n)
		}
		if n := m.Count(t, "lockreg.jdbc.statement.duration"); n < 2 {
			t.Errorf("%d statements recorded, want at least an acquisition and a release", n)
		}
	})
}

// A lease handed over by a release, which the waiter reads when the
// release's announcement wakes it, is counted as a hand-off.
func TestMetricsCountAHandOff(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		region := randomRegion()
		m := telemetrytest.NewMetrics()
		r1, _ := process(t, db, region, l)
		repo2 := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithListener(l), jdbc.WithMeterProvider(m.Provider))
		r2, err := registry.New(repo2, registry.WithIdleBetweenTries(time.Minute), registry.WithMeterProvider(m.Provider))
		if err != nil {
			t.Fatal(err)
		}
		defer r2.Close(context.Background())
		// The listener wakes every waiter once it first listens: started
		// here, that wake-up cannot send the waiter below to ask a third
		// time while the release hands it the lease, which it would then
		// take with its own statement, not as a hand-off.
		ready := make(chan struct{}, 1)
		stop := repo2.Notify("other", ready)
		defer stop()
		<-ready
		l1 := r1.Obtain("k")
		if err := l1.LockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- r2.Obtain("k").LockContext(t.Context()) }()
		// The waiter asks twice, before and after it subscribes to
		// announcements, and then sleeps for its idle minute.
		testdb.WaitFor(t, "the waiter's second attempt", func() bool {
			return m.Count(t, "lockreg.jdbc.statement.duration", tel.Operation.String("acquire_or_wait")) >= 2
		})
		if err := l1.UnlockContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if n := m.Sum(t, "lockreg.lock.handoffs"); n != 1 {
			t.Errorf("%d hand-offs, want 1", n)
		}
	})
}

// The repository's background errors go to WithLogger's logger with its
// region, client and backend.
func TestBackgroundErrorsAreLoggedWithTheRepositoryFields(t *testing.T) {
	db := sqliteDB(t)
	var buf telemetrytest.Buffer
	region := randomRegion()
	repo := newRepo(t, db, jdbc.WithRegion(region), jdbc.WithClientID("c1"), jdbc.WithPrefix("NOTABLE_"),
		jdbc.WithLogger(buf.Logger()), jdbc.WithCleanup(time.Hour, 10*time.Millisecond))
	// The clean-up starts with the first acquisition, which fails: the
	// table does not exist.
	if _, _, err := repo.Acquire(t.Context(), "k", time.Second); !errors.Is(err, jdbc.ErrNoTable) {
		t.Fatalf("acquire: %v, want ErrNoTable", err)
	}
	testdb.WaitFor(t, "a logged clean-up failure", func() bool { return strings.Contains(buf.String(), "clean-up") })
	for _, want := range []string{"region=" + region, "client=c1", "backend=sqlite", "level=ERROR"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("record %q lacks %q", buf.String(), want)
		}
	}
}
