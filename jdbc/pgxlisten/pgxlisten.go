// Package pgxlisten lets a PostgreSQL lock repository of package jdbc hear
// released locks through LISTEN/NOTIFY when the database is opened with the
// pgx driver (github.com/jackc/pgx/v5/stdlib):
//
//	db, _ := sql.Open("pgx", dsn)
//	repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithListener(pgxlisten.New(db)))
//
// The listener copies the connection settings of db's connections and
// listens on a connection of its own, outside db's pool, opened while
// registries wait and closed with the repository. Behind PgBouncer in
// transaction pooling mode, give it a database opened on PostgreSQL itself:
// LISTEN needs a session of its own (see package jdbc).
package pgxlisten

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockreg/lockreg/jdbc"
)

type listener struct{ db *sql.DB }

// New returns a listener that connects as db's connections do. db must use
// the pgx driver (github.com/jackc/pgx/v5/stdlib): jdbc.NewLockRepository
// refuses the listener otherwise, with an error wrapping
// jdbc.ErrInvalidOption. For lib/pq, use package pqlisten.
func New(db *sql.DB) jdbc.Listener { return listener{db} }

// Check reports why the listener cannot work with its database: a nil one,
// or one whose driver is not pgx/v5's. It does no I/O.
func (l listener) Check(context.Context) error {
	if l.db == nil {
		return errors.New("pgxlisten: nil database")
	}
	if d, ok := l.db.Driver().(*stdlib.Driver); !ok || d == nil {
		return fmt.Errorf("pgxlisten: the database's driver is %T, not pgx/v5/stdlib's; "+
			"for lib/pq use package pqlisten", l.db.Driver())
	}
	return nil
}

func (l listener) Listen(ctx context.Context, channel string, ready func(), notify func(string)) error {
	cfg, err := l.config(ctx)
	if err != nil {
		return err
	}
	// A connection of its own: one borrowed from the pool would stay locked
	// by database/sql for as long as it listens, and statements of the pool
	// prepared on it could then not be closed.
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	ready()
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		notify(n.Payload)
	}
}

// config copies the settings of one of db's connections.
func (l listener) config(ctx context.Context) (*pgx.ConnConfig, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var cfg *pgx.ConnConfig
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgxlisten: the database's driver is %T, not pgx/v5/stdlib", dc)
		}
		cfg = sc.Conn().Config().Copy()
		// The copy still delivers notifications to the pool connection's
		// buffer; pgx installs the new connection's own when it is nil.
		cfg.OnNotification = nil
		return nil
	})
	return cfg, err
}
