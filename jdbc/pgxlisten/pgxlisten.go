// Package pgxlisten lets a PostgreSQL lock repository of package jdbc hear
// released locks through LISTEN/NOTIFY when the database is opened with the
// pgx driver (github.com/jackc/pgx/v5/stdlib):
//
//	db, _ := sql.Open("pgx", dsn)
//	repo, err := jdbc.NewLockRepository(db, jdbc.WithListener(pgxlisten.New(db)))
//
// The listener borrows one connection of db's pool while registries wait,
// and closes it, rather than return it with LISTEN state, when it stops.
package pgxlisten

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockreg/lockreg/jdbc"
)

type listener struct{ db *sql.DB }

// New returns a listener on connections of db, which must use the pgx
// driver; Listen fails otherwise.
func New(db *sql.DB) jdbc.Listener { return listener{db} }

func (l listener) Listen(ctx context.Context, channel string, ready func(), notify func(string)) error {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgxlisten: the database's driver is %T, not pgx/v5/stdlib", dc)
		}
		// Whatever ends the loop, the connection has LISTEN state or is
		// broken: ErrBadConn makes database/sql close it.
		return errors.Join(listen(ctx, sc.Conn(), channel, ready, notify), driver.ErrBadConn)
	})
}

func listen(ctx context.Context, c *pgx.Conn, channel string, ready func(), notify func(string)) error {
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
