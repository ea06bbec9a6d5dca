package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
)

// countingConnector opens connections of a database/sql driver whose
// statements and commits are counted in c, as counter counts pgx's: for
// the drivers without a tracer (MySQL, SQLite). A wrapped driver is not
// recognised by lockreg's dialect detection: set the dialect explicitly.
type countingConnector struct {
	drv driver.Driver
	dsn string
	c   *counter
}

// openCounted opens a pool of driverName on dsn whose statements and
// commits are counted.
func openCounted(driverName, dsn string, pool int) (*sql.DB, *counter, error) {
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, nil, err
	}
	drv := probe.Driver()
	probe.Close()
	c := new(counter)
	db := sql.OpenDB(&countingConnector{drv: drv, dsn: dsn, c: c})
	sizePool(db, pool)
	return db, c, nil
}

func (k *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var (
		conn driver.Conn
		err  error
	)
	if dc, ok := k.drv.(driver.DriverContext); ok {
		var cn driver.Connector
		if cn, err = dc.OpenConnector(k.dsn); err == nil {
			conn, err = cn.Connect(ctx)
		}
	} else {
		conn, err = k.drv.Open(k.dsn)
	}
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: k.c}, nil
}

func (k *countingConnector) Driver() driver.Driver { return k.drv }

// countingConn counts what it sends; inTx tracks the transaction, which
// database/sql confines to one goroutine at a time.
type countingConn struct {
	driver.Conn
	c    *counter
	inTx bool
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := ex.ExecContext(ctx, query, args)
	if err != driver.ErrSkip { // skipped: database/sql prepares it, and the statement counts
		c.c.statement(c.inTx, query)
	}
	return res, err
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := q.QueryContext(ctx, query, args)
	if err != driver.ErrSkip {
		c.c.statement(c.inTx, query)
	}
	return rows, err
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var (
		st  driver.Stmt
		err error
	)
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, conn: c, query: query}, nil
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		tx, err = c.Conn.Begin() //nolint:staticcheck // the driver has nothing else
	}
	c.c.statement(false, "begin")
	if err != nil {
		return nil, err
	}
	c.inTx = true
	return &countingTx{Tx: tx, conn: c}, nil
}

func (c *countingConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type countingTx struct {
	driver.Tx
	conn *countingConn
}

func (t *countingTx) Commit() error {
	t.conn.c.statement(true, "commit")
	t.conn.inTx = false
	return t.Tx.Commit()
}

func (t *countingTx) Rollback() error {
	t.conn.c.statement(true, "rollback")
	t.conn.inTx = false
	return t.Tx.Rollback()
}

type countingStmt struct {
	driver.Stmt
	conn  *countingConn
	query string
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.conn.c.statement(s.conn.inTx, s.query)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, errors.New("bench: counting driver: statement without ExecContext")
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.conn.c.statement(s.conn.inTx, s.query)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, errors.New("bench: counting driver: statement without QueryContext")
}
