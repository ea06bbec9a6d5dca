// Package pqlisten lets a PostgreSQL lock repository of package jdbc hear
// released locks through LISTEN/NOTIFY when the database is opened with
// lib/pq. lib/pq listens on a connection of its own, opened from a
// connection string:
//
//	db, _ := sql.Open("postgres", dsn)
//	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithListener(pqlisten.New(dsn)))
//
// The connection is opened while registries wait and closed when the
// repository is; after a failure, also a failed first connection, the
// repository reports it and reconnects with backoff. Behind PgBouncer in
// transaction pooling mode, give it PostgreSQL's own connection string:
// LISTEN needs a session of its own (see package jdbc).
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

// New returns a listener that connects with dsn, a lib/pq connection
// string. jdbc.NewLockRepository refuses it, with an error wrapping
// jdbc.ErrInvalidOption, when lib/pq cannot parse dsn.
func New(dsn string) jdbc.Listener { return listener{dsn} }

// Check reports why the listener cannot work: a connection string lib/pq
// cannot parse. It does no I/O.
func (l listener) Check(context.Context) error {
	if _, err := pq.NewConfig(l.dsn); err != nil {
		return fmt.Errorf("pqlisten: the connection string: %w", err)
	}
	return nil
}

func (l listener) Listen(ctx context.Context, channel string, ready func(), notify func(string)) error {
	// A failed connection attempt or a lost connection ends Listen, as the
	// jdbc.Listener contract asks, so that the repository reports it and
	// reconnects with its backoff; lib/pq would otherwise retry on its own,
	// silently.
	lost := make(chan error, 1)
	events := func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventDisconnected, pq.ListenerEventConnectionAttemptFailed:
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
	// pl.Listen blocks until lib/pq has connected; closing pl ends it.
	listened := make(chan error, 1)
	go func() { listened <- pl.Listen(channel) }()
	pending := true
	defer func() {
		pl.Close()
		if pending {
			<-listened
		}
		for range pl.Notify { // closed when lib/pq's goroutine ends
		}
	}()
	select {
	case err := <-listened:
		pending = false
		if err != nil {
			return fmt.Errorf("pqlisten: listening: %w", err)
		}
	case err := <-lost:
		return fmt.Errorf("pqlisten: connecting: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	ready()
	for {
		select {
		case n, ok := <-pl.Notify:
			switch {
			case !ok:
				return errors.New("pqlisten: the listener closed")
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
