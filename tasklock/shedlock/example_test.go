package shedlock_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/tasklock"
	"github.com/lockreg/lockreg/tasklock/shedlock"
)

func Example() {
	dir, err := os.MkdirTemp("", "shedlock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "locks.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	// ShedLock's table, as ShedLock's DDL makes it; harmless if it exists.
	cfg := shedlock.Config{UseDBTime: true} // as the Java side's usingDbTime()
	if err := shedlock.CreateSchema(ctx, db, cfg); err != nil {
		log.Fatal(err)
	}
	repo, err := shedlock.NewRepository(ctx, db, cfg)
	if err != nil {
		log.Fatal(err)
	}
	// lockAtMostFor defaults to the registry's TTL.
	executor, err := tasklock.New(repo, registry.WithTTL(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer executor.Close(ctx)

	ran, err := executor.Run(ctx, "reportTask", func(ctx context.Context) error {
		fmt.Println("reporting")
		return nil
	}, tasklock.LockAtLeastFor(time.Minute))
	fmt.Println("ran:", ran, err)

	// Within lockAtLeastFor the task is skipped, here as in Java.
	ran, err = executor.Run(ctx, "reportTask", func(ctx context.Context) error { return nil })
	fmt.Println("ran again:", ran, err)
	// Output:
	// reporting
	// ran: true <nil>
	// ran again: false <nil>
}
