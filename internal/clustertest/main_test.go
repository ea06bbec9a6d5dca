package clustertest

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/internal/testharness"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/registry"
)

// TestMain runs the tests, or, in a child process started by a test, the
// child's router until it is told to stop.
func TestMain(m *testing.M) {
	if testharness.InChild() {
		os.Exit(testharness.ChildMain(locks))
	}
	goleak.VerifyTestMain(m)
}

// locks are in the lock table of the clusters' PostgreSQL, each process's
// repository with a listener (waiters queue and are woken by NOTIFY).
var locks = testharness.Locks{
	Repository: func(ctx context.Context, db *sql.DB, _ []string, region, clientID string) (registry.Repository, func(), error) {
		repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithRegion(region), jdbc.WithClientID(clientID),
			jdbc.WithListener(pgxlisten.New(db)))
		return repo, func() {}, err
	},
}
