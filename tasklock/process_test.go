package tasklock_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/tasklock"
)

// TestTaskLockProcessFuzz is TestTaskLockFuzz across OS processes: the test
// binary re-executes itself as four children, each with eight goroutines,
// each an instance of its own (executor, repository, client id) running two
// tasks alternately. Every execution increments a counter row in the same
// database by a read-modify-write that loses an update if two executions of
// a task overlap; the children report how often their Run calls ran the
// task, and the counters must equal those totals exactly.

// The child's configuration, passed in its environment.
const (
	procFuzzHelperEnv  = "LOCKREG_TASKFUZZ_HELPER" // the child's number
	procFuzzDriverEnv  = "LOCKREG_TASKFUZZ_DRIVER"
	procFuzzDSNEnv     = "LOCKREG_TASKFUZZ_DSN"
	procFuzzDialectEnv = "LOCKREG_TASKFUZZ_DIALECT"
	procFuzzRegionEnv  = "LOCKREG_TASKFUZZ_REGION"
	procFuzzNamesEnv   = "LOCKREG_TASKFUZZ_NAMES" // the two task names, comma-separated
)

const (
	procFuzzProcesses  = 4
	procFuzzGoroutines = 8
	procFuzzCalls      = 15 // Run calls per goroutine
	procFuzzTable      = "task_fuzz_counter"
	procFuzzPrefix     = "TASKFUZZ ran" // the child's report: prefix, then one count per name
)

func TestTaskLockProcessFuzz(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, db testdb.Backend) {
		db.Exec(t, `CREATE TABLE IF NOT EXISTS `+procFuzzTable+` (
			region VARCHAR(100) NOT NULL,
			name VARCHAR(100) NOT NULL,
			n INTEGER NOT NULL,
			PRIMARY KEY (region, name))`)
		region := testdb.RandomRegion()
		names := [2]string{taskName(), taskName()}
		for _, name := range names {
			db.Exec(t, `INSERT INTO `+procFuzzTable+` (region, name, n) VALUES (?, ?, 0)`, region, name)
		}
		t.Cleanup(func() {
			db.DB.ExecContext(ctxb, db.Q(`DELETE FROM `+procFuzzTable+` WHERE region = ?`), region)
		})

		ctx, cancel := context.WithTimeout(ctxb, 2*time.Minute)
		defer cancel()
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			totals [2]int64
		)
		for p := range procFuzzProcesses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestTaskLockProcessFuzzHelper$", "-test.count=1")
				cmd.Env = append(os.Environ(),
					procFuzzHelperEnv+"="+strconv.Itoa(p),
					procFuzzDriverEnv+"="+db.Driver,
					procFuzzDSNEnv+"="+db.DSN,
					procFuzzDialectEnv+"="+string(db.Dialect),
					procFuzzRegionEnv+"="+region,
					procFuzzNamesEnv+"="+names[0]+","+names[1],
				)
				cmd.WaitDelay = 5 * time.Second
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Errorf("child %d: %v\nstdout:\n%s\nstderr:\n%s", p, err, stdout.String(), stderr.String())
					return
				}
				counts, err := parseProcFuzzReport(stdout.String())
				if err != nil {
					t.Errorf("child %d: %v\nstdout:\n%s\nstderr:\n%s", p, err, stdout.String(), stderr.String())
					return
				}
				t.Logf("child %d ran %d + %d", p, counts[0], counts[1])
				mu.Lock()
				totals[0] += counts[0]
				totals[1] += counts[1]
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}

		for i, name := range names {
			var n int64
			err := db.DB.QueryRowContext(ctxb, db.Q(`SELECT n FROM `+procFuzzTable+` WHERE region = ? AND name = ?`),
				region, name).Scan(&n)
			if err != nil {
				t.Fatalf("reading the counter of %s: %v", name, err)
			}
			t.Logf("task %d: counter %d, Run reported %d executions", i+1, n, totals[i])
			if n != totals[i] {
				t.Errorf("task %d: the counter is %d, but Run reported %d executions", i+1, n, totals[i])
			}
			if totals[i] == 0 {
				t.Errorf("task %d never ran", i+1)
			}
		}
	})
}

// parseProcFuzzReport reads the counts from a child's report line.
func parseProcFuzzReport(out string) ([2]int64, error) {
	var counts [2]int64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), procFuzzPrefix+" ")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 {
			return counts, fmt.Errorf("malformed report %q", sc.Text())
		}
		for i, f := range fields {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return counts, fmt.Errorf("malformed report %q: %v", sc.Text(), err)
			}
			counts[i] = n
		}
		return counts, nil
	}
	return counts, fmt.Errorf("no %q line", procFuzzPrefix)
}

// TestTaskLockProcessFuzzHelper is the body of a child process of
// TestTaskLockProcessFuzz; run directly it does nothing.
func TestTaskLockProcessFuzzHelper(t *testing.T) {
	proc := os.Getenv(procFuzzHelperEnv)
	if proc == "" {
		t.Skip("requires being run as a child process of TestTaskLockProcessFuzz")
	}
	counts, err := procFuzzChild()
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", proc, err)
		os.Exit(2)
	}
	fmt.Printf("%s %d %d\n", procFuzzPrefix, counts[0], counts[1])
	os.Exit(0) // before goleak and the test framework's output
}

// procFuzzChild runs the goroutines of one child and returns how many times
// its Run calls ran each task.
func procFuzzChild() ([2]int64, error) {
	var counts [2]int64
	dialect := jdbc.Dialect(os.Getenv(procFuzzDialectEnv))
	region := os.Getenv(procFuzzRegionEnv)
	names := strings.Split(os.Getenv(procFuzzNamesEnv), ",")
	if len(names) != 2 || region == "" {
		return counts, fmt.Errorf("bad environment: region %q, names %q", region, names)
	}
	q := func(query string) string {
		if dialect == jdbc.Postgres {
			return sqlx.Rebind(sqlx.DOLLAR, query)
		}
		return query
	}
	db, err := sql.Open(os.Getenv(procFuzzDriverEnv), os.Getenv(procFuzzDSNEnv))
	if err != nil {
		return counts, err
	}
	defer db.Close()
	db.SetMaxOpenConns(12)

	ctx := context.Background()
	// increment is the task: a read-modify-write of the counter that loses
	// an update when two executions of a task overlap.
	increment := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			var n int64
			if err := db.QueryRowContext(ctx, q(`SELECT n FROM `+procFuzzTable+` WHERE region = ? AND name = ?`),
				region, name).Scan(&n); err != nil {
				return fmt.Errorf("reading the counter: %w", err)
			}
			time.Sleep(time.Millisecond)
			if _, err := db.ExecContext(ctx, q(`UPDATE `+procFuzzTable+` SET n = ? WHERE region = ? AND name = ?`),
				n+1, region, name); err != nil {
				return fmt.Errorf("writing the counter: %w", err)
			}
			return nil
		}
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for g := range procFuzzGoroutines {
		repo, err := jdbc.NewLockRepository(ctx, db, jdbc.WithRegion(region))
		if err != nil {
			return counts, err
		}
		e, err := tasklock.New(repo)
		if err != nil {
			return counts, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ran [2]int64
			var err error
			for i := range procFuzzCalls {
				job := (g + i) % 2
				var r bool
				r, err = e.Run(ctx, names[job], increment(names[job]),
					tasklock.LockAtMostFor(5*time.Second), tasklock.LockAtLeastFor(0))
				if r {
					ran[job]++
				}
				if err != nil {
					err = fmt.Errorf("goroutine %d, call %d: Run(%s): %w", g, i, names[job], err)
					break
				}
			}
			if cerr := e.Close(ctx); cerr != nil && err == nil {
				err = fmt.Errorf("goroutine %d: Close: %w", g, cerr)
			}
			mu.Lock()
			defer mu.Unlock()
			counts[0] += ran[0]
			counts[1] += ran[1]
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return counts, fmt.Errorf("%d goroutines failed, first: %w", len(errs), errs[0])
	}
	return counts, nil
}
