package jdbc_test

import (
	"context"
	"testing"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// TestConformance runs the shared repository suite on every backend, each
// run in a region of its own.
func TestConformance(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		region := randomRegion()
		janitor := newRepo(t, db, jdbc.WithRegion(region))
		registrytest.Run(t, registrytest.Backend{
			NewRepository: func(t testing.TB) registry.Repository {
				return newRepo(t, db, jdbc.WithRegion(region))
			},
			DeleteExpired: func(ctx context.Context) error {
				_, err := janitor.DeleteExpired(ctx)
				return err
			},
			NewMissingStorage: func(t testing.TB) registry.Repository {
				return newRepo(t, db, jdbc.WithPrefix("MISSING_"))
			},
		})
	})
}

// BenchmarkLockUnlock measures one Lock+Unlock cycle of a registry lock,
// uncontended: the database round trips plus the registry's overhead.
func BenchmarkLockUnlock(b *testing.B) {
	for _, db := range testDatabases(b) {
		b.Run(db.Name, func(b *testing.B) {
			db.Require(b)
			r, err := registry.New(newRepo(b, db))
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close(context.Background())
			l := r.Obtain("bench")
			for b.Loop() {
				l.Lock()
				l.Unlock()
			}
		})
	}
}
