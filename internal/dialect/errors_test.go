package dialect

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// cuttingProxy forwards TCP connections to addr and cuts a connection, both
// ways, once the client sends bytes containing cut: the client has sent a
// statement and gets no result.
func cuttingProxy(t *testing.T, addr string, cut []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(c, s); c.Close() }()
			go func() {
				defer wg.Done()
				defer s.Close()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && bytes.Contains(buf[:n], cut) {
						return
					}
					if n > 0 {
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// go-sql-driver/mysql's ErrInvalidConn, the error of a connection that
// broke in the middle of a statement, is transient although this package
// does not import the driver.
func TestABrokenMySQLConnectionIsTransient(t *testing.T) {
	dsn := os.Getenv("LOCKREG_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := probe.PingContext(ctx); err != nil {
		msg := fmt.Sprintf("mariadb unreachable at %s (set LOCKREG_MYSQL_DSN): %v", dsn, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skipf("skipped: %s (start MariaDB; with CI=true this fails)", msg)
	}
	cfg.Addr = cuttingProxy(t, cfg.Addr, []byte("lockreg_cut_here"))
	mysql.SetLogger(log{}) // the driver logs the broken connection
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `SELECT 'lockreg_cut_here'`)
	if !errors.Is(err, mysql.ErrInvalidConn) {
		t.Fatalf("the cut statement returned %v; want the driver's ErrInvalidConn", err)
	}
	if !IsTransient(err) || !IsTransient(fmt.Errorf("wrapped: %w", err)) {
		t.Errorf("IsTransient(%v) = false; want true", err)
	}
	if IsTransient(errors.New("invalid connection string")) {
		t.Error("IsTransient reads more than the driver's exact error text")
	}
}

type log struct{}

func (log) Print(...any) {}
