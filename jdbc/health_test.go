package jdbc_test

import (
	"errors"
	"testing"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pqlisten"
	"github.com/lockreg/lockreg/registry"
)

// Check for readiness probes: the table, and the listener once started.

func TestRegistryCheckPassesOnACompleteTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		r, err := registry.New(newRepo(t, db))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(t.Context())
		if err := r.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRegistryCheckReportsAMissingTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		r, err := registry.New(newRepo(t, db, jdbc.WithPrefix("NOSUCH_")))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(t.Context())
		if err := r.Check(t.Context()); !errors.Is(err, jdbc.ErrNoTable) {
			t.Fatalf("got %v, want an error wrapping jdbc.ErrNoTable", err)
		}
	})
}

// startListener subscribes to key's announcements, which starts repo's
// listener, and returns the channel that hears them.
func startListener(t *testing.T, repo *jdbc.LockRepository) <-chan struct{} {
	c := make(chan struct{}, 1)
	t.Cleanup(repo.Notify("k", c))
	return c
}

func TestCheckPassesOnceTheListenerListens(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, l jdbc.Listener) {
		repo := newRepo(t, db, jdbc.WithListener(l))
		<-startListener(t, repo) // the listener wakes every waiter once it listens
		if err := repo.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// A listener that cannot connect leaves leases working: Check says so
// with registry.ErrListenerDown, which a probe may choose to ignore.
func TestCheckReportsAListenerThatCannotConnect(t *testing.T) {
	forEachPostgres(t, func(t *testing.T, db testDB, _ jdbc.Listener) {
		failed := make(chan struct{}, 1)
		repo := newRepo(t, db, jdbc.WithListener(pqlisten.New("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")),
			jdbc.WithErrorHandler(func(error) {
				select {
				case failed <- struct{}{}:
				default:
				}
			}))
		if err := repo.Check(t.Context()); err != nil {
			t.Fatalf("Check before the listener started: %v", err)
		}
		startListener(t, repo)
		<-failed
		err := repo.Check(t.Context())
		if !errors.Is(err, registry.ErrListenerDown) {
			t.Fatalf("got %v, want an error wrapping registry.ErrListenerDown", err)
		}
		mustAcquire(t, repo, "k", longTTL) // the table still works
	})
}
