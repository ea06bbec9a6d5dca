package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/groupstoretest"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore returns a store on db in a region of its own, closed when t
// ends; cfg's zero Region is replaced by a random one.
func newStore(t testing.TB, db sqlstore.DB, cfg sqlstore.Config) *sqlstore.Store {
	t.Helper()
	if cfg.Region == "" {
		cfg.Region = testdb.RandomRegion()
	}
	s, err := sqlstore.New(db, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// ownPrefix returns a table prefix of its own, starting with tag, whose
// group and lock tables are dropped when t ends.
func ownPrefix(t *testing.T, db *sql.DB, tag string) string {
	prefix := tag + strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", "")[:12]) + "_"
	t.Cleanup(func() {
		for _, s := range []string{"GROUP_MESSAGE", "GROUP", "LOCK_WAIT", "LOCK"} {
			if _, err := db.Exec(`DROP TABLE IF EXISTS ` + prefix + s); err != nil {
				t.Error(err)
			}
		}
	})
	return prefix
}

func TestConformance(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		if db.Name == "postgres-pq" && testing.Short() {
			t.Skip("short: pgx covers PostgreSQL")
		}
		groupstoretest.Run(t, func(t *testing.T) groupstore.Store { return newStore(t, db.DB, sqlstore.Config{}) })
	})
}

func TestStoresInDifferentRegionsDoNotShareGroups(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		a, b := newStore(t, db.DB, sqlstore.Config{}), newStore(t, db.DB, sqlstore.Config{})
		if _, _, err := a.Add(ctx, "k", groupstore.Message{UUID: "m1"}, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Get(ctx, "k"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Errorf("the other region's Get = %v, want ErrNotFound", err)
		}
		if _, o, err := b.Add(ctx, "k", groupstore.Message{UUID: "m1"}, 0); err != nil || o != groupstore.Added {
			t.Errorf("the other region's Add = %v, %v", o, err)
		}
	})
}

func TestAStoreWithAPrefixWithoutTablesReportsErrNoTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		s := newStore(t, db.DB, sqlstore.Config{Prefix: "NOPE_"})
		_, _, err := s.Add(context.Background(), "k", groupstore.Message{UUID: "m1"}, 0)
		if !errors.Is(err, sqlstore.ErrNoTable) || !strings.Contains(err.Error(), "NOPE_GROUP") {
			t.Errorf("Add without tables = %v, want ErrNoTable naming NOPE_GROUP", err)
		}
	})
}

func TestNewChecksTheConfig(t *testing.T) {
	db := testdb.SQLite(t)
	for name, cfg := range map[string]sqlstore.Config{
		"Prefix":           {Prefix: "bad prefix"},
		"Region":           {Region: strings.Repeat("r", 101)},
		"Dialect":          {Dialect: "oracle"},
		"CleanupRetention": {CleanupRetention: -time.Second},
		"CleanupInterval":  {CleanupInterval: -1},
	} {
		if _, err := sqlstore.New(db.DB, cfg); !errors.Is(err, sqlstore.ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("New with a bad %s: %v; want ErrInvalidConfig naming it", name, err)
		}
	}
	if _, err := sqlstore.New(nil, sqlstore.Config{}); err == nil {
		t.Error("nil db accepted")
	}
	if _, err := sqlstore.New((*sql.DB)(nil), sqlstore.Config{}); err == nil {
		t.Error("typed nil db accepted")
	}
}

// CreateSchema creates the group tables and the lock table of the
// clean-up's lease, and may run again; jdbc.CreateSchema creates the lock
// tables only.
func TestCreateSchemaCreatesTheGroupTablesAndTheLockTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		ctx := context.Background()
		prefix := ownPrefix(t, db.DB, "SQ")
		if err := jdbc.CreateSchema(ctx, db.DB, jdbc.WithPrefix(prefix)); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, db.DB, sqlstore.Config{Prefix: prefix})
		if _, _, err := s.Add(ctx, "k", groupstore.Message{UUID: "m"}, 0); !errors.Is(err, sqlstore.ErrNoTable) {
			t.Fatalf("Add after jdbc.CreateSchema: %v; want ErrNoTable", err)
		}
		for range 2 {
			if err := sqlstore.CreateSchema(ctx, db.DB, sqlstore.Config{Prefix: prefix}); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.Add(ctx, "k", groupstore.Message{UUID: "m"}, 0); err != nil {
			t.Fatalf("Add after sqlstore.CreateSchema: %v", err)
		}
		repo, err := jdbc.NewLockRepository(ctx, db.DB, jdbc.WithPrefix(prefix), jdbc.WithoutCleanup())
		if err != nil {
			t.Fatal(err)
		}
		defer repo.Close(ctx)
		if err := repo.Check(ctx); err != nil {
			t.Errorf("the lock table after sqlstore.CreateSchema: %v", err)
		}
	})
}
