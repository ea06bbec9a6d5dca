package jdbc_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/lockreg/lockreg/jdbc"
)

// turnCounter is a TCP proxy that counts round trips: how often the server
// starts answering after the client has sent something.
type turnCounter struct {
	ln     net.Listener
	target string
	turns  atomic.Int64
	sent   atomic.Bool // the client sent data the server has not answered
	wg     sync.WaitGroup
}

func newTurnCounter(t testing.TB, target string) *turnCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &turnCounter{ln: ln, target: target}
	var conns sync.Map
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, s)
			p.wg.Go(func() { p.pipe(s, c, func() { p.sent.Store(true) }); s.Close() })
			p.wg.Go(func() {
				p.pipe(c, s, func() {
					if p.sent.Swap(false) {
						p.turns.Add(1)
					}
				})
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, s any) bool { c.(net.Conn).Close(); s.(net.Conn).Close(); return true })
		p.wg.Wait()
	})
	return p
}

// pipe copies src to dst, calling seen before forwarding each chunk.
func (p *turnCounter) pipe(dst io.Writer, src io.Reader, seen func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen()
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *turnCounter) addr() string { return p.ln.Addr().String() }

// viaProxy returns db's DSN with the server address replaced by the proxy's,
// and the server address.
func viaProxy(t testing.TB, db testDB) (dsn, server string, swap func(proxy string) string) {
	t.Helper()
	switch db.Dialect {
	case jdbc.Postgres:
		u, err := url.Parse(db.DSN)
		if err != nil || u.Host == "" {
			t.Skipf("cannot proxy DSN %q", db.DSN)
		}
		return db.DSN, u.Host, func(proxy string) string { v := *u; v.Host = proxy; return v.String() }
	case jdbc.MySQL:
		cfg, err := mysql.ParseDSN(db.DSN)
		if err != nil || cfg.Net != "tcp" {
			t.Skipf("cannot proxy DSN %q", db.DSN)
		}
		return db.DSN, cfg.Addr, func(proxy string) string { c := cfg.Clone(); c.Addr = proxy; return c.FormatDSN() }
	}
	t.Skip("requires a network server, which SQLite is not")
	return
}

func TestAcquireRenewAndReleaseTakeOneRoundTripEach(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		_, server, swap := viaProxy(t, db)
		proxy := newTurnCounter(t, server)
		pool := openPool(t, db.Driver, swap(proxy.addr()))
		pool.SetMaxOpenConns(1) // one connection: the statements stay prepared on it
		repo := newRepoOn(t, pool, jdbc.WithRegion(randomRegion()))
		ctx := context.Background()

		cycle := func() {
			t.Helper()
			mustAcquire(t, repo, "k", longTTL)
			if err := repo.Renew(ctx, "k", longTTL); err != nil {
				t.Fatal(err)
			}
			if err := repo.Release(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		// Connects and prepares: on PostgreSQL the first acquisition of
		// the key sends the upsert, the next ones an UPDATE.
		cycle()
		cycle()

		for _, op := range []struct {
			name string
			run  func() error
		}{
			{"Acquire", func() error { _, _, err := repo.Acquire(ctx, "k", longTTL); return err }},
			{"Acquire again", func() error { _, _, err := repo.Acquire(ctx, "k", longTTL); return err }},
			{"Renew", func() error { return repo.Renew(ctx, "k", longTTL) }},
			{"Release", func() error { return repo.Release(ctx, "k") }},
		} {
			before := proxy.turns.Load()
			if err := op.run(); err != nil {
				t.Fatalf("%s: %v", op.name, err)
			}
			if n := proxy.turns.Load() - before; n != 1 {
				t.Errorf("%s took %d round trips, want 1", op.name, n)
			}
		}
	})
}

// With WithoutPreparedStatements and the driver settings its doc names
// (for a pooler in transaction mode), each statement is still one round
// trip on PostgreSQL.
func TestWithoutPreparedStatementsEachStatementTakesOneRoundTrip(t *testing.T) {
	// The option's driver settings are PostgreSQL's.
	params := map[string]string{"postgres-pgx": "default_query_exec_mode=exec", "postgres-pq": "binary_parameters=yes"}
	forEachDBWhere(t, func(db testDB) bool { return params[db.Name] != "" }, func(t *testing.T, db testDB) {
		param := params[db.Name]
		_, server, swap := viaProxy(t, db)
		proxy := newTurnCounter(t, server)
		u, err := url.Parse(swap(proxy.addr()))
		if err != nil {
			t.Fatal(err)
		}
		u.RawQuery += "&" + param
		pool := openPool(t, db.Driver, u.String())
		repo := newRepoOn(t, pool, jdbc.WithRegion(randomRegion()), jdbc.WithoutPreparedStatements())
		ctx := context.Background()
		// Connects; pgx pings a connection on its first reuse.
		for range 2 {
			mustAcquire(t, repo, "k", longTTL)
		}
		for _, op := range []struct {
			name string
			run  func() error
		}{
			{"Acquire", func() error { _, _, err := repo.Acquire(ctx, "k", longTTL); return err }},
			{"Renew", func() error { return repo.Renew(ctx, "k", longTTL) }},
			{"Release", func() error { return repo.Release(ctx, "k") }},
			{"Acquire after release", func() error { _, _, err := repo.Acquire(ctx, "k", longTTL); return err }},
		} {
			before := proxy.turns.Load()
			if err := op.run(); err != nil {
				t.Fatalf("%s: %v", op.name, err)
			}
			if n := proxy.turns.Load() - before; n != 1 {
				t.Errorf("%s took %d round trips, want 1", op.name, n)
			}
		}
	})
}
