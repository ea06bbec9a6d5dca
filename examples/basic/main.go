// Command basic shows two lock registries, standing for two instances of a
// service, taking turns on one key in a shared lock table.
//
// By default the table lives in an SQLite file, so no server is needed:
//
//	go run ./examples/basic
//
// -dsn switches to PostgreSQL (through pgx) or MariaDB/MySQL:
//
//	go run ./examples/basic -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//	go run ./examples/basic -dsn 'mysql://root@tcp(127.0.0.1:3306)/test?parseTime=true'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

func main() {
	defaultFile := filepath.Join(os.TempDir(), "lockreg-basic.db")
	dsn := flag.String("dsn", "sqlite:"+defaultFile, "database: sqlite:FILE, postgres://... or mysql://...")
	turns := flag.Int("turns", 3, "critical sections per instance")
	flag.Parse()
	if err := run(os.Stdout, *dsn, *turns); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer, dsn string, turns int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := jdbc.CreateSchema(ctx, db); err != nil {
		return err
	}

	// One repository and registry per instance: each has its own client id.
	var instances []*registry.Registry
	for range 2 {
		repo, err := jdbc.NewLockRepository(ctx, db)
		if err != nil {
			return err
		}
		r, err := registry.New(repo, registry.WithIdleBetweenTries(20*time.Millisecond))
		if err != nil {
			return err
		}
		defer r.Close(context.Background())
		instances = append(instances, r)
	}

	var wg sync.WaitGroup
	errs := make(chan error, len(instances))
	for i, r := range instances {
		name := fmt.Sprintf("instance-%d", i+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := r.Obtain("nightly-report")
			for turn := 1; turn <= turns; turn++ {
				if err := l.LockContext(ctx); err != nil {
					errs <- err
					return
				}
				fmt.Fprintf(out, "%s holds %q (turn %d)\n", name, l.Key(), turn)
				time.Sleep(50 * time.Millisecond) // the guarded work
				fmt.Fprintf(out, "%s releases it\n", name)
				if err := l.UnlockContext(ctx); err != nil {
					errs <- err
					return
				}
				time.Sleep(60 * time.Millisecond) // other work; the waiting instance polls every 20 ms
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// open picks the driver from the DSN's scheme.
func open(dsn string) (*sql.DB, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return sql.Open("pgx", dsn)
	case strings.HasPrefix(dsn, "mysql://"):
		return sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	case strings.HasPrefix(dsn, "sqlite:"):
		file := strings.TrimPrefix(dsn, "sqlite:")
		return sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	}
	return nil, fmt.Errorf("unknown database in -dsn %q: use sqlite:FILE, postgres://... or mysql://...", dsn)
}
