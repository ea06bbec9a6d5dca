// Package pqlisten lets a PostgreSQL lock repository of package jdbc hear
// released locks through LISTEN/NOTIFY when the database is opened with
// lib/pq. lib/pq listens on a connection of its own, opened from a
// connection string:
//
//	db, _ := sql.Open("postgres", dsn)
//	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithListener(pqlisten.New(dsn)))
//
// The connection is opened while registries wait and closed when the
// repository is; after a failure the repository reports it and reconnects.
// Behind PgBouncer in transaction pooling mode, give it PostgreSQL's own
// connection string: LISTEN needs a session of its own (see package jdbc).
package pqlisten

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/lockreg/lockreg/jdbc"
)

type listener struct{ dsn string }

// New returns a listener that connects with dsn, a lib/pq connection string.
func New(dsn string) jdbc.Listener { return listener{dsn} }

func (l listener) Listen(ctx context.Context, channel string, ready func(), notify func(string)) error {
	// A lost connection ends Listen, as the jdbc.Listener contract asks, so
	// that the repository reports it and reconnects.
	lost := make(chan error, 1)
	events := func(ev pq.ListenerEventType, err error) {
		if ev == pq.ListenerEventDisconnected {
			if err == nil {
				err = errors.New("disconnected")
			}
			select {
			case lost <- err:
			default:
			}
		}
	}
	pl := pq.NewListener(l.dsn, 100*time.Millisecond, 5*time.Second, events)
	defer pl.Close()
	// Listen blocks until the server answers; closing pl cancels it.
	stop := context.AfterFunc(ctx, func() { pl.Close() })
	defer stop()
	if err := pl.Listen(channel); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	ready()
	for {
		select {
		case n, ok := <-pl.Notify:
			switch {
			case !ok:
				return ctx.Err()
			case n == nil: // reconnected: notifications may have been lost
				ready()
			default:
				notify(n.Extra)
			}
		case err := <-lost:
			return fmt.Errorf("pqlisten: connection lost: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
