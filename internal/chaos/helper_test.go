//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// The test binary re-executes itself as a child process that runs only
// TestHelperProcess, configured by these environment variables.
const (
	helperEnv  = "LOCKREG_CHAOS_HELPER" // the child's job: "fuzz", "hold", "scheduler" or "dbscheduler"
	driverEnv  = "LOCKREG_CHAOS_DRIVER"
	dsnEnv     = "LOCKREG_CHAOS_DSN"
	dialectEnv = "LOCKREG_CHAOS_DIALECT"
	runEnv     = "LOCKREG_CHAOS_RUN" // region and run column
	keysEnv    = "LOCKREG_CHAOS_KEYS"
	procEnv    = "LOCKREG_CHAOS_PROC"
	workersEnv = "LOCKREG_CHAOS_WORKERS"
	itersEnv   = "LOCKREG_CHAOS_ITERATIONS"
	ttlEnv     = "LOCKREG_CHAOS_TTL"
)

// child describes a child process: what the parent starts, and what the
// child reads back from its environment.
type child struct {
	mode       string
	b          testdb.Backend
	run        string
	keys       []string
	proc       int
	workers    int
	iterations int
	ttl        time.Duration
}

// command returns the command that runs c.
func (c child) command(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperEnv+"="+c.mode,
		driverEnv+"="+c.b.Driver,
		dsnEnv+"="+c.b.DSN,
		dialectEnv+"="+string(c.b.Dialect),
		runEnv+"="+c.run,
		keysEnv+"="+strings.Join(c.keys, ","),
		procEnv+"="+strconv.Itoa(c.proc),
		workersEnv+"="+strconv.Itoa(c.workers),
		itersEnv+"="+strconv.Itoa(c.iterations),
		ttlEnv+"="+c.ttl.String(),
	)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// keyOf is the key worker w of process p uses in iteration i: the parent
// computes the expected counts with it.
func keyOf(keys []string, p, w, i int) string { return keys[(p+w+i)%len(keys)] }

// TestHelperProcess is the body of a child process; run directly it does
// nothing.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("requires being run as a child process of the other tests")
	}
	var err error
	switch mode {
	case "fuzz":
		err = childFuzz()
	case "hold":
		err = childHold()
	case "scheduler":
		err = childScheduler() // scheduler_child_test.go
	case "dbscheduler":
		err = childDBScheduler() // scheduler_java_test.go
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s %s: %v\n", mode, os.Getenv(procEnv), err)
		os.Exit(2)
	}
	os.Exit(0)
}

// readChildEnv is, in a child process, the child it was started as, with
// its database open.
func readChildEnv() (*child, error) {
	c := &child{mode: os.Getenv(helperEnv), run: os.Getenv(runEnv), keys: strings.Split(os.Getenv(keysEnv), ","),
		b: testdb.Backend{Driver: os.Getenv(driverEnv), DSN: os.Getenv(dsnEnv), Dialect: jdbc.Dialect(os.Getenv(dialectEnv))}}
	var err error
	if c.proc, err = strconv.Atoi(os.Getenv(procEnv)); err != nil {
		return nil, err
	}
	if c.workers, err = strconv.Atoi(os.Getenv(workersEnv)); err != nil {
		return nil, err
	}
	if c.iterations, err = strconv.Atoi(os.Getenv(itersEnv)); err != nil {
		return nil, err
	}
	if c.ttl, err = time.ParseDuration(os.Getenv(ttlEnv)); err != nil {
		return nil, err
	}
	if c.b.DB, err = sql.Open(c.b.Driver, c.b.DSN); err != nil {
		return nil, err
	}
	return c, nil
}

// registry returns a registry of the child's own client.
func (c *child) registry(onError func(string, error)) (*registry.Registry, error) {
	repo, err := c.b.NewRepository(context.Background(), c.run)
	if err != nil {
		return nil, err
	}
	return registry.New(repo, registry.WithTTL(c.ttl), registry.WithIdleBetweenTries(25*time.Millisecond),
		registry.WithErrorHandler(onError))
}

// retry runs f until it succeeds, fails with errRefused, or the hold ends:
// SQLite reports a busy database, and a busy 2-core machine may time out.
func retry(done <-chan struct{}, f func() error) error {
	var err error
	for range 50 {
		if err = f(); err == nil || errors.Is(err, errRefused) {
			return err
		}
		select {
		case <-done:
			return fmt.Errorf("the hold ended while retrying: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return err
}

// childFuzz runs workers goroutines, each taking iterations locks in turn
// on the keys and, holding each, incrementing its counter guarded by the
// token and recording the holding interval in the database's clock.
func childFuzz() error {
	c, err := readChildEnv()
	if err != nil {
		return err
	}
	defer c.b.DB.Close()
	reg, err := c.registry(func(string, error) {})
	if err != nil {
		return err
	}
	defer reg.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	errs := make(chan error, c.workers)
	var wg sync.WaitGroup
	for w := range c.workers {
		wg.Go(func() {
			for i := range c.iterations {
				if err := c.hold(ctx, reg, keyOf(c.keys, c.proc, w, i)); err != nil {
					errs <- fmt.Errorf("worker %d, iteration %d: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(func() (all []error) {
		for err := range errs {
			all = append(all, err)
		}
		return all
	}()...)
}

// hold takes key's lock once and does the guarded work.
func (c *child) hold(ctx context.Context, reg *registry.Registry, key string) error {
	l := reg.Obtain(key)
	if err := l.LockContext(ctx); err != nil {
		return err
	}
	token, done := l.Token(), l.Done()
	var acquired, released int64
	err := retry(done, func() (err error) { acquired, err = c.b.Clock(ctx); return err })
	if err == nil {
		err = retry(done, func() error { return incrementFenced(ctx, c.b, c.run, key, token) })
	}
	if err == nil {
		err = retry(done, func() (err error) { released, err = c.b.Clock(ctx); return err })
	}
	if err == nil {
		err = retry(done, func() error {
			_, err := c.b.DB.ExecContext(ctx, c.b.Q(`INSERT INTO chaos_interval (run, k, token, proc, acquired, released) VALUES (?, ?, ?, ?, ?, ?)`),
				c.run, key, token, c.proc, acquired, released)
			return err
		})
	}
	if uerr := l.UnlockContext(ctx); uerr != nil {
		err = errors.Join(err, fmt.Errorf("unlock (the lease was lost while held): %w", uerr))
	}
	return err
}

// childHold takes the first key's lock, prints "HELD token client" on
// stdout and waits to be killed.
func childHold() error {
	c, err := readChildEnv()
	if err != nil {
		return err
	}
	reg, err := c.registry(func(string, error) {})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := reg.Obtain(c.keys[0])
	if err := l.LockContext(ctx); err != nil {
		return err
	}
	fmt.Printf("HELD %d\n", l.Token())
	time.Sleep(time.Hour) // until SIGKILL
	return nil
}

// readHeld waits for the child's "HELD token" line.
func readHeld(r io.Reader) (int64, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("reading the child's report: %w (got %q)", err, line)
	}
	var token int64
	if _, err := fmt.Sscanf(line, "HELD %d", &token); err != nil {
		return 0, fmt.Errorf("the child reported %q: %w", line, err)
	}
	return token, nil
}
