//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// hostileKeys are keys that must work like any other.
var hostileKeys = map[string]string{
	"empty":         "",
	"1 MiB":         strings.Repeat("k", 1<<20),
	"invalid UTF-8": "\xff\xfe\xc3\x28",
	"NUL bytes":     "a\x00b\x00",
	"SQL":           "x'); DROP TABLE INT_LOCK; --",
	"quotes":        `"'` + "`" + `\`,
	"UUID-like":     "ABCDEF01-2345-6789-ABCD-EF0123456789",
}

// short cuts an error message that repeats a 1 MiB key.
func short(err error) string {
	if err == nil {
		return "<nil>"
	}
	if s := err.Error(); len(s) > 300 {
		return s[:300] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return err.Error()
}

// noPanic runs f and fails t if it panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// Keys are opaque: the empty key, a 1 MiB key, invalid UTF-8, NUL bytes
// and SQL each lock exactly once, exclude another client, do not collide
// with a neighbouring key and leave the lock table intact.
func TestHostileKeysLockExactlyOnce(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			run := newRun()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			regA := newRegistry(t, b, run)
			regB := newRegistry(t, b, run)
			for name, key := range hostileKeys {
				noPanic(t, name, func() {
					a := regA.Obtain(key)
					if err := a.LockContext(ctx); err != nil {
						t.Errorf("%s: lock: %s", name, short(err))
						return
					}
					first := a.Token()
					if ok, err := regB.Obtain(key).TryLockContext(context.Background()); ok || err != nil {
						t.Errorf("%s: a second client took a held key: %v, %s", name, ok, short(err))
					}
					neighbour := regB.Obtain(key + "\x00")
					if ok, err := neighbour.TryLockContext(context.Background()); !ok || err != nil {
						t.Errorf("%s: the neighbouring key (NUL appended) is taken too: %v, %s", name, ok, short(err))
					} else if err := neighbour.UnlockContext(ctx); err != nil {
						t.Error(short(err))
					}
					if err := a.UnlockContext(ctx); err != nil {
						t.Errorf("%s: unlock: %s", name, short(err))
					}
					l := regB.Obtain(key)
					if err := l.LockContext(ctx); err != nil {
						t.Errorf("%s: relock by the second client: %s", name, short(err))
						return
					}
					if l.Token() <= first {
						t.Errorf("%s: token %d after %d", name, l.Token(), first)
					}
					if err := l.UnlockContext(ctx); err != nil {
						t.Error(short(err))
					}
				})
			}
			repo, err := jdbc.NewLockRepository(ctx, b.DB)
			if err != nil {
				t.Fatal(err)
			}
			if err := repo.Check(ctx); err != nil {
				t.Errorf("the lock table after the hostile keys: %v", err)
			}
			repo.Close(ctx)
		})
	}
}

// A prefix is pasted into SQL, so one with quotes, semicolons, spaces or
// other non-identifier characters is refused with ErrInvalidOption by
// NewLockRepository and CreateSchema, before any I/O.
func TestPrefixesThatAreNotIdentifiersAreInvalidOptions(t *testing.T) {
	prefixes := []string{"it's_", "a;b_", "a b_", `"Q"_`, "INT_; DROP TABLE INT_LOCK; --", "", "1ABC_", "ÄÖ_",
		strings.Repeat("P", 41)}
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			for _, p := range prefixes {
				noPanic(t, fmt.Sprintf("prefix %q", p), func() {
					if _, err := jdbc.NewLockRepository(context.Background(), b.DB, jdbc.WithPrefix(p)); !errors.Is(err, jdbc.ErrInvalidOption) || !strings.Contains(err.Error(), "WithPrefix") {
						t.Errorf("NewLockRepository(WithPrefix(%q)): %v, want ErrInvalidOption naming WithPrefix", p, err)
					}
					if err := jdbc.CreateSchema(context.Background(), b.DB, jdbc.WithPrefix(p)); !errors.Is(err, jdbc.ErrInvalidOption) {
						t.Errorf("CreateSchema(WithPrefix(%q)): %v, want ErrInvalidOption", p, err)
					}
				})
			}
		})
	}
}

// A region is a bound parameter: quotes, semicolons, spaces and SQL in it
// work, and a lock in one region excludes its own region only.
func TestRegionsWithQuotesAndSemicolonsAreBoundParameters(t *testing.T) {
	suffixes := []string{"it's", "a;b", "a b", `"q"`, "'); DROP TABLE INT_LOCK; --", "\\"}
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			base := newRun()
			for _, s := range suffixes {
				region := base + s
				noPanic(t, fmt.Sprintf("region %q", region), func() {
					a := newRegistry(t, b, region).Obtain("k")
					if err := a.LockContext(ctx); err != nil {
						t.Errorf("region %q: lock: %v", region, err)
						return
					}
					if ok, err := newRegistry(t, b, region).Obtain("k").TryLockContext(context.Background()); ok || err != nil {
						t.Errorf("region %q: a second client took a held key: %v, %v", region, ok, err)
					}
					other := newRegistry(t, b, region+"'").Obtain("k")
					if ok, err := other.TryLockContext(context.Background()); !ok || err != nil {
						t.Errorf("region %q: the key is taken in region %q too: %v, %v", region, region+"'", ok, err)
					} else {
						other.UnlockContext(ctx)
					}
					if err := a.UnlockContext(ctx); err != nil {
						t.Error(err)
					}
				})
			}
		})
	}
}

// A nil database, typed or not, is an error of NewLockRepository and
// CreateSchema, not a panic.
func TestANilDatabaseIsAnError(t *testing.T) {
	for name, db := range map[string]jdbc.DB{"nil": nil, "(*sql.DB)(nil)": (*sql.DB)(nil), "(*sqlx.DB)(nil)": (*sqlx.DB)(nil),
		"&sqlx.DB{}": &sqlx.DB{}} {
		noPanic(t, name, func() {
			if repo, err := jdbc.NewLockRepository(context.Background(), db); err == nil || repo != nil {
				t.Errorf("NewLockRepository(%s): %v, %v; want an error", name, repo, err)
			}
			if err := jdbc.CreateSchema(context.Background(), db); err == nil {
				t.Errorf("CreateSchema(%s): no error", name)
			}
		})
	}
}

// A closed *sql.DB makes lock attempts fail at once with database/sql's
// error, which is not retried: nothing is granted.
func TestAClosedDatabaseFailsLockAttemptsWithItsError(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			run := newRun()
			closed := testdb.OpenPool(t, b.Driver, b.DSN)
			repo, err := jdbc.NewLockRepository(context.Background(), closed, jdbc.WithRegion(run))
			if err != nil {
				t.Fatal(err)
			}
			closed.Close()
			reg, err := registry.New(repo, registry.WithErrorHandler(func(string, error) {}))
			if err != nil {
				t.Fatal(err)
			}
			defer reg.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			noPanic(t, "LockContext", func() {
				err := reg.Obtain("k").LockContext(ctx)
				if err == nil || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, sql.ErrConnDone) && !strings.Contains(err.Error(), "database is closed") {
					t.Errorf("LockContext on a closed database: %v; want database/sql's error at once", err)
				}
			})
			noPanic(t, "TryLockContext", func() {
				// Another key: after a failed wait, the key's local lock is
				// held for a moment by the background clean-up of its queue
				// place, and a single attempt meanwhile reports false, nil.
				if ok, err := reg.Obtain("k2").TryLockContext(context.Background()); ok || err == nil {
					t.Errorf("TryLockContext on a closed database: %v, %v", ok, err)
				}
			})
			// Nothing was written: a client on an open pool takes the key.
			l := newRegistry(t, b, run).Obtain("k")
			if ok, err := l.TryLockContext(context.Background()); !ok || err != nil {
				t.Errorf("the key is not free after the failed attempts: %v, %v", ok, err)
			} else {
				l.UnlockContext(ctx)
			}
		})
	}
}

// A missing lock table is an error wrapping ErrNoTable, from lock attempts
// and from Check, and is not retried.
func TestAMissingTableIsErrNoTable(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			repo, err := jdbc.NewLockRepository(context.Background(), b.DB, jdbc.WithPrefix("CHAOS_MISSING_"), jdbc.WithRegion(newRun()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := repo.Check(ctx); !errors.Is(err, jdbc.ErrNoTable) {
				t.Errorf("Check: %v, want ErrNoTable", err)
			}
			reg, err := registry.New(repo, registry.WithErrorHandler(func(string, error) {}))
			if err != nil {
				t.Fatal(err)
			}
			noPanic(t, "lock", func() {
				if err := reg.Obtain("k").LockContext(ctx); !errors.Is(err, jdbc.ErrNoTable) {
					t.Errorf("LockContext: %v, want ErrNoTable", err)
				}
				if ok, err := reg.Obtain("k2").TryLockContext(context.Background()); ok || !errors.Is(err, jdbc.ErrNoTable) {
					t.Errorf("TryLockContext: %v, %v, want ErrNoTable", ok, err)
				}
			})
			if err := reg.Close(ctx); err != nil && !errors.Is(err, jdbc.ErrNoTable) {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// A dialect that is not the database's fails with the database's error,
// at once and without granting anything: when the repository is made (its
// check of the table reads a column or catalog that database does not
// have) or at each lock attempt.
func TestTheWrongDialectIsAClearErrorNeverALock(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			run := newRun()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, d := range []jdbc.Dialect{jdbc.Postgres, jdbc.MySQL, jdbc.SQLite} {
				if d == b.Dialect {
					continue
				}
				noPanic(t, string(d), func() {
					repo, err := jdbc.NewLockRepository(ctx, b.DB, jdbc.WithDialect(d), jdbc.WithRegion(run))
					if err != nil {
						t.Logf("WithDialect(%s) on %s: refused when made: %v", d, b.Name, err)
						return
					}
					reg, err := registry.New(repo, registry.WithErrorHandler(func(string, error) {}))
					if err != nil {
						t.Fatal(err)
					}
					defer reg.Close(ctx)
					actx, acancel := context.WithTimeout(ctx, 10*time.Second)
					defer acancel()
					err = reg.Obtain("k").LockContext(actx)
					switch {
					case err == nil:
						t.Errorf("WithDialect(%s) on %s: the lock was granted", d, b.Name)
					case errors.Is(err, context.DeadlineExceeded), errors.Is(err, registry.ErrTransient):
						t.Errorf("WithDialect(%s) on %s: retried as transient instead of failing: %v", d, b.Name, err)
					default:
						t.Logf("WithDialect(%s) on %s: %v", d, b.Name, err)
					}
				})
			}
			// Nothing was granted: a client of the right dialect takes the key.
			l := newRegistry(t, b, run).Obtain("k")
			if ok, err := l.TryLockContext(context.Background()); !ok || err != nil {
				t.Errorf("the key is not free after the failed attempts: %v, %v", ok, err)
			} else {
				l.UnlockContext(ctx)
			}
		})
	}
}
