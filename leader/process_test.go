package leader_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/leader"
	"github.com/lockreg/lockreg/registry"
)

// The test binary re-executes itself as child processes, each an instance
// with a candidate, that run only TestLeaderProcessHelper, configured by
// these environment variables.
const (
	helperEnv  = "LOCKREG_LEADER_HELPER" // the child's job: "hold" or "rotate"
	driverEnv  = "LOCKREG_LEADER_DRIVER"
	dsnEnv     = "LOCKREG_LEADER_DSN"
	dialectEnv = "LOCKREG_LEADER_DIALECT"
	regionEnv  = "LOCKREG_LEADER_REGION"
	ttlEnv     = "LOCKREG_LEADER_TTL"
	procEnv    = "LOCKREG_LEADER_PROC"
	termsEnv   = "LOCKREG_LEADER_TERMS"
)

const processRole = "process-leader"

// child is a child process: an instance of the service.
type child struct {
	cmd   *exec.Cmd
	lines chan string // its stdout, line by line
	err   bytes.Buffer
}

// startChild starts a child for db and region doing mode.
func startChild(t *testing.T, ctx context.Context, db testdb.Backend, region, mode string, proc int, ttl time.Duration, terms int) *child {
	t.Helper()
	c := &child{lines: make(chan string, 16)}
	c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLeaderProcessHelper$", "-test.count=1")
	c.cmd.Env = append(os.Environ(),
		helperEnv+"="+mode, driverEnv+"="+db.Driver, dsnEnv+"="+db.DSN, dialectEnv+"="+string(db.Dialect),
		regionEnv+"="+region, ttlEnv+"="+ttl.String(), procEnv+"="+strconv.Itoa(proc), termsEnv+"="+strconv.Itoa(terms))
	c.cmd.Stderr = &c.err
	c.cmd.WaitDelay = 5 * time.Second
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	return c
}

// granted waits for the child's "GRANTED token" line.
func (c *child) granted(t *testing.T) int64 {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		var token int64
		if _, err := fmt.Sscanf(line, "GRANTED %d", &token); !ok || err != nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
			t.Fatalf("the child reported %q (%v), not GRANTED; stderr:\n%s", line, err, c.err.String())
		}
		return token
	case <-time.After(patience):
		t.Fatal("the child was not granted the leadership")
		return 0
	}
}

// kill kills the child with SIGKILL and waits for it.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := c.cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("the child was not killed: %v", err)
	}
	for range c.lines {
	}
}

// A leader killed with SIGKILL never releases its lease: the candidate of
// another process leads once the lease has expired by the database's
// clock, never before, with a greater token.
func TestAKilledLeaderIsReplacedOnlyAfterItsLeaseExpires(t *testing.T) {
	// A TTL long enough that the lease surely outlives the moment the
	// parent reads it after the kill.
	const ttl = 4 * time.Second
	forEachDB(t, func(t *testing.T, db testdb.Backend) {
		region := newRegion(t, db)
		ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
		defer cancel()
		a := startChild(t, ctx, db, region, "hold", 0, ttl, 0)
		killedToken := a.granted(t)
		b := startChild(t, ctx, db, region, "hold", 1, ttl, 0)
		defer func() {
			b.cmd.Process.Kill()
			b.cmd.Wait()
		}()

		a.kill(t)
		killed := time.Now()
		last := db.MustLease(t, region, processRole) // final: its holder is dead
		if last.Fence != killedToken {
			t.Fatalf("the lease carries token %d, not the killed leader's %d: read too late", last.Fence, killedToken)
		}
		token := b.granted(t)
		took := time.Since(killed)
		if token <= killedToken {
			t.Errorf("the new leader's token %d is not greater than the killed leader's %d", token, killedToken)
		}
		// jdbc's token is the database's clock, in microseconds, when the
		// acquisition ran (or the last token plus one, if greater).
		if token < last.Expires {
			t.Errorf("the new leader acquired the lease %v before the killed leader's lease expired, by the database's clock",
				time.Duration(last.Expires-token)*time.Microsecond)
		}
		t.Logf("killed leader (token %d) replaced %v after SIGKILL, %v after its lease expired by the database's clock (TTL %v)",
			killedToken, took.Round(time.Millisecond), (time.Duration(token-last.Expires) * time.Microsecond).Round(time.Millisecond), ttl)
	})
}

// Three processes take turns leading: each leader records its term in the
// database's clock, increments a counter guarded by its token and yields.
// The terms, in token order, never overlap, every term's guarded write
// counts, and more than one process leads.
func TestLeadershipPassesBetweenProcessesWithoutOverlap(t *testing.T) {
	const (
		procs = 3
		terms = 4 // per process
	)
	forEachDB(t, func(t *testing.T, db testdb.Backend) {
		region := newRegion(t, db)
		db.Exec(t, `INSERT INTO leader_counter (region, n, fence) VALUES (?, 0, 0)`, region)
		ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
		defer cancel()
		var wg sync.WaitGroup
		for p := range procs {
			c := startChild(t, ctx, db, region, "rotate", p, time.Second, terms)
			wg.Go(func() {
				for range c.lines {
				}
				if err := c.cmd.Wait(); err != nil {
					t.Errorf("child %d: %v\n%s", p, err, c.err.String())
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}

		rows, err := db.DB.Query(db.Q(`SELECT token, proc, started, ended FROM leader_term WHERE region = ? ORDER BY token`), region)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var (
			n         int
			prevEnd   int64
			prevToken int64
			leaders   = map[int]bool{}
		)
		for rows.Next() {
			var token, started, ended int64
			var proc int
			if err := rows.Scan(&token, &proc, &started, &ended); err != nil {
				t.Fatal(err)
			}
			if n > 0 && token == prevToken {
				t.Errorf("two terms with token %d", token)
			}
			if n > 0 && started < prevEnd {
				t.Errorf("the term of token %d (process %d) started %v before the previous term ended",
					token, proc, time.Duration(prevEnd-started)*time.Microsecond)
			}
			n++
			prevEnd, prevToken = ended, token
			leaders[proc] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != procs*terms {
			t.Errorf("%d terms recorded, want %d", n, procs*terms)
		}
		var count int64
		if err := db.DB.QueryRow(db.Q(`SELECT n FROM leader_counter WHERE region = ?`), region).Scan(&count); err != nil {
			t.Fatal(err)
		}
		if count != int64(n) {
			t.Errorf("the guarded counter is %d after %d terms", count, n)
		}
		if len(leaders) < 2 {
			t.Errorf("only %d process led", len(leaders))
		}
		t.Logf("%d terms led by %d processes without overlap", n, len(leaders))
	})
}

// TestLeaderProcessHelper is the body of a child process; run directly it
// does nothing.
func TestLeaderProcessHelper(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("requires being run as a child process of the other tests")
	}
	err := runChild(mode)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s %s: %v\n", mode, os.Getenv(procEnv), err)
		os.Exit(2)
	}
	os.Exit(0) // before goleak and the test framework's output
}

func runChild(mode string) error {
	region := os.Getenv(regionEnv)
	ttl, err := time.ParseDuration(os.Getenv(ttlEnv))
	if err != nil {
		return err
	}
	proc, err := strconv.Atoi(os.Getenv(procEnv))
	if err != nil {
		return err
	}
	terms, err := strconv.Atoi(os.Getenv(termsEnv))
	if err != nil {
		return err
	}
	db := testdb.Backend{Driver: os.Getenv(driverEnv), DSN: os.Getenv(dsnEnv), Dialect: jdbc.Dialect(os.Getenv(dialectEnv))}
	if db.DB, err = sql.Open(db.Driver, db.DSN); err != nil {
		return err
	}
	defer db.DB.Close()
	repo, err := db.NewRepository(context.Background(), region)
	if err != nil {
		return err
	}
	reg, err := registry.New(repo, registry.WithIdleBetweenTries(25*time.Millisecond),
		registry.WithErrorHandler(func(string, error) {}))
	if err != nil {
		return err
	}
	defer reg.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	switch mode {
	case "hold":
		return childHold(ctx, reg, ttl)
	case "rotate":
		return childRotate(ctx, reg, db, region, proc, ttl, terms)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// childHold leads, reports "GRANTED token" and keeps leading until it is
// killed.
func childHold(ctx context.Context, reg *registry.Registry, ttl time.Duration) error {
	c, err := leader.New(reg, processRole, leader.WithTTL(ttl), leader.WithErrorHandler(func(error) {}))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	term, err := c.Wait(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("GRANTED %d\n", term.Token())
	<-term.Context().Done()
	return fmt.Errorf("the term ended: %w", context.Cause(term.Context()))
}

// childRotate leads terms times: each time it records the term's start,
// increments the counter guarded by its token, leads a while (past a
// renewal), records the end and yields.
func childRotate(ctx context.Context, reg *registry.Registry, db testdb.Backend, region string, proc int,
	ttl time.Duration, terms int) error {
	c, err := leader.New(reg, processRole, leader.WithTTL(ttl), leader.WithBusyWait(300*time.Millisecond),
		leader.WithErrorHandler(func(err error) { fmt.Fprintln(os.Stderr, err) }))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	for i := range terms {
		term, err := c.Wait(ctx)
		if err != nil {
			return err
		}
		tctx := term.Context()
		started, err := db.Clock(tctx)
		if err != nil {
			return fmt.Errorf("term %d: %w", i, err)
		}
		res, err := db.DB.ExecContext(tctx, db.Q(`UPDATE leader_counter SET n = n + 1, fence = ? WHERE region = ? AND fence < ?`),
			term.Token(), region, term.Token())
		if err != nil {
			return fmt.Errorf("term %d: %w", i, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("term %d: the guarded write with token %d was refused (%d rows, %v)", i, term.Token(), n, err)
		}
		select {
		case <-time.After(ttl / 2): // past the first renewal
		case <-tctx.Done():
			return fmt.Errorf("term %d ended early: %w", i, context.Cause(tctx))
		}
		ended, err := db.Clock(tctx)
		if err != nil {
			return fmt.Errorf("term %d: %w", i, err)
		}
		if tctx.Err() != nil {
			return fmt.Errorf("term %d ended early: %w", i, context.Cause(tctx))
		}
		if _, err := db.DB.ExecContext(ctx, db.Q(`INSERT INTO leader_term (region, token, proc, started, ended) VALUES (?, ?, ?, ?, ?)`),
			region, term.Token(), proc, started, ended); err != nil {
			return fmt.Errorf("term %d: %w", i, err)
		}
		term.Yield()
	}
	return nil
}
