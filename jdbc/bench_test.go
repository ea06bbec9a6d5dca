package jdbc_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
)

// BenchmarkAcquireRelease measures one Acquire plus one Release of a free
// lock: two statements, two round trips on a server.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, db := range testDatabases(b) {
		b.Run(db.Name, func(b *testing.B) {
			db.Require(b)
			repo := newRepo(b, db)
			ctx := context.Background()
			for b.Loop() {
				_, ok, err := repo.Acquire(ctx, "bench", time.Minute)
				if err != nil || !ok {
					b.Fatalf("Acquire = %v, %v", ok, err)
				}
				if err := repo.Release(ctx, "bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAcquireContended measures an Acquire that loses to another
// client: the poll a waiter repeats.
func BenchmarkAcquireContended(b *testing.B) {
	for _, db := range testDatabases(b) {
		b.Run(db.Name, func(b *testing.B) {
			db.Require(b)
			region := randomRegion()
			holder := newRepo(b, db, jdbc.WithRegion(region))
			waiter := newRepo(b, db, jdbc.WithRegion(region))
			ctx := context.Background()
			if _, ok, err := holder.Acquire(ctx, "bench", time.Hour); err != nil || !ok {
				b.Fatalf("Acquire = %v, %v", ok, err)
			}
			for b.Loop() {
				if _, ok, err := waiter.Acquire(ctx, "bench", time.Minute); err != nil || ok {
					b.Fatalf("Acquire = %v, %v", ok, err)
				}
			}
		})
	}
}
