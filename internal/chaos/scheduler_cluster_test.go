//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/scheduler"
)

// Four scheduler processes on one table run every one of 20 000 one-time
// executions (2 000 on SQLite) scheduled while they run, and a recurring task, through a
// process killed with SIGKILL, one paused with SIGSTOP past its heartbeats
// and, on PostgreSQL and MariaDB, a restart of the server: no pick version
// is run twice, every execution runs and its success is recorded once
// (each further run is one whose process was killed or reported its
// completion refused or not written), the paused process's late
// completions of executions run elsewhere meanwhile are refused, and
// nothing is left picked. On SQLite the
// processes share a file; the pause is left out there, because a process
// paused inside a write transaction stops every writer of the file until
// it resumes, which is SQLite's design and not the scheduler's to change.
func TestFourSchedulerProcessesRunEveryExecutionThroughAKillAPauseAndARestart(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			var stop, start string
			if b.Dialect != jdbc.SQLite {
				stop, start = serverControl(t, b)
				t.Cleanup(func() { ensureUp(t, b, start) })
			}
			c := newSchedCluster(t, b)
			c.vacuum()
			for i := range 4 {
				c.start(i, "FIXED_DELAY|200ms", 5*time.Millisecond)
			}
			const batches = 40
			n := scale(20000)
			if b.Dialect == jdbc.SQLite {
				n = scale(2000) // the race detector slows SQLite's transpiled C about tenfold
			}
			per := n / batches
			var pausedHeld []*scheduler.Execution
			for k := range batches {
				switch {
				case k == 10:
					c.kill(0)
				case k >= 20 && pausedHeld == nil && b.Dialect != jdbc.SQLite:
					pausedHeld = c.pause(1)
				case k == 30 && stop != "":
					c.restart(stop, start)
				}
				c.scheduleBatch(k*per, per)
				time.Sleep(50 * time.Millisecond)
			}
			if b.Dialect != jdbc.SQLite && pausedHeld == nil {
				t.Fatal("process 1 never held an execution when paused")
			}
			runs, ticks := c.finish(n)
			if pausedHeld != nil {
				c.checkRefused(runs, 1, pausedHeld)
			}
			t.Logf("%s: %d executions, %d runs (%d of the recurring task); %s", b.Name, n, len(runs), ticks, c.summary())
		})
	}
}

// A recurring task on a cron schedule runs once per period across four
// processes, also across a rolling deploy that changes the schedule from
// every second to every other second: no period runs twice, and once the
// last process of the old schedule is gone, the runs keep the new one.
func TestARecurringTaskRunsOncePerPeriodAcrossTheClusterAndADeployThatChangesItsSchedule(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			b.Require(t)
			c := newSchedCluster(t, b)
			const before, after = "CRON|* * * * * *", "CRON|*/2 * * * * *"
			for i := range 4 {
				c.start(i, before, 50*time.Millisecond)
			}
			time.Sleep(scale(4 * time.Second))
			for i := range 4 { // one process after another, as a rolling deploy
				c.stop(i)
				c.start(4+i, after, 50*time.Millisecond)
			}
			deployed := time.Now()
			time.Sleep(scale(5 * time.Second))
			c.stopAll()

			runs := c.runs()
			settled := deployed.Add(2 * time.Second)
			var old, late int
			for _, r := range runs {
				switch {
				case r.due.Before(deployed):
					old++
				case r.due.After(settled):
					late++
					if r.due.UnixMilli()%2000 != 0 {
						t.Errorf("run at %s after the deploy: not on the new schedule (every other second)", r.due.Format(time.StampMilli))
					}
				}
			}
			if old < 2 || late < 1 {
				t.Errorf("%d runs before the deploy, %d after it settled: the task did not keep running", old, late)
			}
			n := c.checkRecurring(runs)
			t.Logf("%s: %d periods run, %d before the deploy, %d after it settled (%d missed whole seconds before the deploy); %s",
				b.Name, n, old, late, missed(runs, deployed), c.summary())
		})
	}
}

// missed counts the whole seconds between the first and the last run due
// before t that have no run (a run started later than its next period
// skips that period, as db-scheduler's cron schedules do).
func missed(runs []*schedRun, t time.Time) int {
	var secs []int64
	for _, r := range runs {
		if r.task == schedTick && r.due.Before(t) {
			secs = append(secs, r.due.Unix())
		}
	}
	if len(secs) < 2 {
		return 0
	}
	slices.Sort(secs)
	secs = slices.Compact(secs)
	return int(secs[len(secs)-1]-secs[0]+1) - len(secs)
}

// schedCluster is the parent's view of scheduler processes on one table.
type schedCluster struct {
	t      *testing.T
	b      testdb.Backend
	run    string
	table  string
	zone   *time.Location // the Go schedulers' TimeZone, the JVM's zone; nil for none
	client *scheduler.Client

	mu    sync.Mutex
	procs map[int]*schedProc
}

// schedProc is one scheduler process.
type schedProc struct {
	index    int
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stderr   bytes.Buffer
	ready    chan struct{}
	done     chan struct{}
	err      error
	killed   bool
	mu       sync.Mutex
	outcomes map[string]string // "task instance version" -> kind
	revived  []string          // "task instance version picked_by" of each dead execution it revived
	bad      []string          // violations, and a Stop that failed
	stopped  bool
}

func newSchedCluster(t *testing.T, b testdb.Backend) *schedCluster {
	return newZonedSchedCluster(t, b, nil)
}

// newZonedSchedCluster is newSchedCluster with the Go schedulers and the
// client writing MySQL/MariaDB times in zone (Config.TimeZone), as a JVM
// in zone does without alwaysPersistTimestampInUTC(); nil for UTC.
func newZonedSchedCluster(t *testing.T, b testdb.Backend, zone *time.Location) *schedCluster {
	t.Helper()
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
	c := &schedCluster{t: t, b: b, run: "chaos-" + id, table: "chaos_st_" + id, zone: zone, procs: map[int]*schedProc{}}
	b.Exec(t, schedRunTable)
	cfg := schedConfig(b, c.table)
	cfg.TimeZone = zone
	if err := scheduler.CreateSchema(context.Background(), b.DB, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.DB.Exec(`DROP TABLE ` + c.table)
		b.DB.Exec(b.Q(`DELETE FROM chaos_sched_run WHERE run = ?`), c.run)
	})
	var err error
	if c.client, err = scheduler.NewClient(b.DB, cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// vacuum does, on PostgreSQL, what autovacuum would do for the table
// while the test runs: the CI server runs with autovacuum off, and without
// it the rows every execution leaves dead, and statistics from when the
// table was empty, make each pick scan the whole backlog (the drain then
// runs at a tenth of its speed). Autovacuum's schedule (a minute's nap) is
// too slow for a table that churns 20 000 rows within one, so it runs
// every two seconds until t ends.
func (c *schedCluster) vacuum() {
	if c.b.Dialect != jdbc.Postgres {
		return
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				c.b.DB.Exec(`VACUUM (ANALYZE) ` + c.table) // fails while the server restarts
			}
		}
	}()
	c.t.Cleanup(func() {
		close(done)
		<-stopped
	})
}

// start starts process i with the recurring task's schedule and the
// handlers' work time, and waits until its scheduler runs.
func (c *schedCluster) start(i int, schedule string, work time.Duration) {
	c.t.Helper()
	c.startChild(i, "scheduler", work, scheduleEnv+"="+schedule)
}

// startChild starts process i in mode (a child of scheduler_child_test.go)
// on the cluster's table with the handlers' work time and env, and waits
// until it runs.
func (c *schedCluster) startChild(i int, mode string, work time.Duration, env ...string) {
	c.t.Helper()
	ch := child{mode: mode, b: c.b, run: c.run, proc: i, workers: 8, ttl: schedHeartbeat(c.b)}
	cmd := ch.command(context.Background())
	cmd.Env = append(cmd.Env, tableEnv+"="+c.table, handleEnv+"="+work.String())
	if c.zone != nil {
		cmd.Env = append(cmd.Env, zoneEnv+"="+c.zone.String())
	}
	cmd.Env = append(cmd.Env, env...)
	p := &schedProc{index: i, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{}), outcomes: map[string]string{}}
	cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		p.read(stdout)
	}()
	go func() {
		<-read
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-p.done
	})
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
	select {
	case <-p.ready:
	case <-p.done:
		c.t.Fatalf("scheduler process %d exited before it ran: %v\n%s", i, p.err, p.tail())
	case <-time.After(time.Minute):
		c.t.Fatalf("scheduler process %d did not run within a minute\n%s", i, p.tail())
	}
}

// read parses a process's report lines.
func (p *schedProc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), schedPrefix)
		if !ok {
			continue
		}
		f := strings.Fields(line)
		p.mu.Lock()
		switch {
		case f[0] == "ready":
			close(p.ready)
		case f[0] == "outcome" && len(f) == 5:
			p.outcomes[strings.Join(f[2:], " ")] = f[1]
		case f[0] == "revived" && len(f) == 5:
			p.revived = append(p.revived, strings.Join(f[1:], " "))
		case f[0] == "violation":
			p.bad = append(p.bad, line)
		case f[0] == "stopped":
			p.stopped = true
			if line != "stopped <nil>" {
				p.bad = append(p.bad, line)
			}
		}
		p.mu.Unlock()
	}
}

func (p *schedProc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stderr.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// lockedWriter serializes a process's standard error with its reports.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

func (c *schedCluster) proc(i int) *schedProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i]
}

// kill kills process i with SIGKILL; its executions stay picked until they
// are found dead.
func (c *schedCluster) kill(i int) {
	c.t.Helper()
	p := c.proc(i)
	p.killed = true
	if err := p.cmd.Process.Kill(); err != nil {
		c.t.Fatal(err)
	}
	<-p.done
}

// freeze stops process i with SIGSTOP and returns the executions picked by
// name once the statements it sent before it stopped have ended on the
// server: from then on nothing the process does changes them.
func (c *schedCluster) freeze(i int, name string) []*scheduler.Execution {
	c.t.Helper()
	if err := c.proc(i).cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	var held []*scheduler.Execution
	for _, e := range c.list(scheduler.Filter{State: scheduler.Picked}) {
		if e.PickedBy == name {
			held = append(held, e)
		}
	}
	return held
}

// pause pauses process i with SIGSTOP for three dead-execution timeouts
// and resumes it; it returns the executions it held, or nil (it is
// resumed at once) when it held none. Those no open transaction of the
// paused process locks are revived and run elsewhere meanwhile; a row it
// locked in a transaction it had begun stays its own, and a revival
// behind that lock waits, until it resumes (or the database ends its
// session).
func (c *schedCluster) pause(i int) []*scheduler.Execution {
	c.t.Helper()
	held := c.freeze(i, fmt.Sprintf("chaos-sched-%d", i))
	defer c.proc(i).cmd.Process.Signal(syscall.SIGCONT)
	if len(held) == 0 {
		return nil
	}
	time.Sleep(3 * schedMissed * schedHeartbeat(c.b))
	return held
}

// scheduleBatch schedules the one-time executions first to first+n-1,
// due now, in one batch of the client.
func (c *schedCluster) scheduleBatch(first, n int) {
	c.t.Helper()
	insts := make([]scheduler.Instance, n)
	for i := range insts {
		insts[i] = scheduler.Instance{Task: schedOnce, ID: fmt.Sprintf("i%06d", first+i)}
	}
	c.retry(fmt.Sprintf("scheduling executions %d to %d", first, first+n-1), func(ctx context.Context) error {
		_, err := c.client.ScheduleBatch(ctx, insts, time.Now())
		return err
	})
}

// finish waits until the n one-time executions are complete, stops the
// processes, checks that none is left picked, that each ran (checkOnce)
// and that the recurring task ran at least twice, and returns the runs
// and the number of the recurring task's periods run.
func (c *schedCluster) finish(n int) (runs []*schedRun, ticks int) {
	c.t.Helper()
	c.waitCompleted()
	c.stopAll()
	if picked := c.list(scheduler.Filter{State: scheduler.Picked}); len(picked) > 0 {
		c.t.Errorf("%d executions left picked, the first by %s", len(picked), picked[0].PickedBy)
	}
	runs = c.runs()
	c.checkOnce(runs, n)
	if ticks = c.checkRecurring(runs); ticks < 2 {
		c.t.Errorf("the recurring task ran %d times", ticks)
	}
	return runs, ticks
}

// waitCompleted waits until no one-time execution is left, for at most
// fifteen minutes (a guard against a hang, not a speed requirement),
// logging the backlog every ten seconds.
func (c *schedCluster) waitCompleted() {
	c.t.Helper()
	deadline, next := time.Now().Add(15*time.Minute), time.Now().Add(10*time.Second)
	for {
		var left int
		c.retry("counting executions", func(ctx context.Context) error {
			return c.b.DB.QueryRowContext(ctx, c.b.Q(`SELECT COUNT(*) FROM `+c.table+` WHERE task_name = ?`), schedOnce).Scan(&left)
		})
		if left == 0 {
			return
		}
		if now := time.Now(); now.After(next) || now.After(deadline) {
			c.t.Logf("%d one-time executions left", left)
			next = now.Add(10 * time.Second)
			if now.After(deadline) {
				for i := range 8 {
					if p := c.proc(i); p != nil {
						c.t.Logf("process %d stderr (tail):\n%s", i, p.tail())
					}
				}
				c.t.Fatal("the one-time executions did not complete within fifteen minutes")
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restart stops the database server for two seconds while the processes
// run, and waits until it answers again.
func (c *schedCluster) restart(stop, start string) {
	c.t.Helper()
	if err := shell(stop); err != nil {
		c.t.Fatalf("stopping %s: %v", c.b.Name, err)
	}
	time.Sleep(2 * time.Second)
	if err := shell(start); err != nil {
		c.t.Fatalf("starting %s: %v", c.b.Name, err)
	}
	if err := pingUntil(c.b.DB, time.Minute); err != nil {
		c.t.Fatalf("%s does not answer after the restart: %v", c.b.Name, err)
	}
}

// retry runs f until it succeeds, for at most a minute: the server may
// just have restarted, and SQLite may be busy.
func (c *schedCluster) retry(what string, f func(ctx context.Context) error) {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *schedCluster) list(f scheduler.Filter) []*scheduler.Execution {
	c.t.Helper()
	if f.Limit == 0 {
		f.Limit = 1 << 20
	}
	var es []*scheduler.Execution
	c.retry("listing executions", func(ctx context.Context) (err error) {
		es, err = c.client.List(ctx, f)
		return err
	})
	return es
}

// stop stops process i gracefully and checks that its Stop succeeded.
func (c *schedCluster) stop(i int) {
	c.t.Helper()
	p := c.proc(i)
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		// Its goroutines, for the cause: SIGQUIT makes the runtime print
		// them and exit.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		c.t.Fatalf("scheduler process %d did not stop within a minute; its standard error and goroutines:\n%s", i, p.stderr.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped || p.err != nil {
		c.t.Errorf("scheduler process %d: Stop not reported (exit: %v)\n%s", i, p.err, p.stderr.String())
	}
}

// stopAll stops every process still running and checks their reports.
func (c *schedCluster) stopAll() {
	c.t.Helper()
	for i := range 8 {
		if p := c.proc(i); p != nil && !p.killed {
			select {
			case <-p.done:
			default:
				c.stop(i)
			}
		}
	}
	for i := range 8 {
		if p := c.proc(i); p != nil {
			for _, b := range p.bad {
				c.t.Errorf("scheduler process %d: %s", i, b)
			}
		}
	}
}

// schedRun is one row of chaos_sched_run.
type schedRun struct {
	task, inst string
	version    int64
	proc       int
	due        time.Time
}

func (c *schedCluster) runs() []*schedRun {
	c.t.Helper()
	rows, err := c.b.DB.Query(c.b.Q(`SELECT task, inst, version, proc, due FROM chaos_sched_run WHERE run = ?
		ORDER BY task, inst, version`), c.run)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var runs []*schedRun
	for rows.Next() {
		r := &schedRun{}
		var due int64
		if err := rows.Scan(&r.task, &r.inst, &r.version, &r.proc, &due); err != nil {
			c.t.Fatal(err)
		}
		r.due = time.UnixMilli(due)
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return runs
}

// outcome is how run r ended by its process's report: "killed" when its
// process was killed, "" when its success was recorded.
func (c *schedCluster) outcome(r *schedRun) string {
	p := c.proc(r.proc)
	if p.killed {
		return "killed"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outcomes[r.task+" "+r.inst+" "+strconv.FormatInt(r.version, 10)]
}

// checkOnce checks the runs of the n one-time executions: each ran, and
// its success was recorded at most once, by its last run; a run before
// the last ended otherwise (its process was killed, or its completion was
// refused or not written), and an execution whose last run is not a
// recorded success was completed by a write whose reply was lost or by a
// process killed after it.
func (c *schedCluster) checkOnce(runs []*schedRun, n int) {
	c.t.Helper()
	by := map[string][]*schedRun{}
	for _, r := range runs {
		if r.task == schedOnce {
			by[r.inst] = append(by[r.inst], r)
		}
	}
	for i := range n {
		inst := fmt.Sprintf("i%06d", i)
		rs := by[inst]
		if len(rs) == 0 {
			c.t.Errorf("execution %s never ran", inst)
			continue
		}
		for j, r := range rs {
			last := j == len(rs)-1
			switch o := c.outcome(r); {
			case o == "" && !last:
				c.t.Errorf("execution %s: its success at version %d was recorded, yet it ran again at version %d",
					inst, r.version, rs[j+1].version)
			case last && o != "" && o != "killed" && o != "unrecorded":
				c.t.Errorf("execution %s: its last run (version %d) ended %s, yet the execution is gone", inst, r.version, o)
			}
		}
	}
}

// checkRecurring checks that no run of the recurring task for one
// execution time had its success recorded twice, and returns the number of
// execution times run.
func (c *schedCluster) checkRecurring(runs []*schedRun) int {
	c.t.Helper()
	recorded := map[int64]*schedRun{}
	times := map[int64]bool{}
	for _, r := range runs {
		if r.task != schedTick {
			continue
		}
		at := r.due.UnixMilli()
		times[at] = true
		if c.outcome(r) != "" {
			continue
		}
		if prev := recorded[at]; prev != nil {
			c.t.Errorf("the recurring task's period at %s ran twice: versions %d (process %d) and %d (process %d)",
				r.due.Format(time.StampMilli), prev.version, prev.proc, r.version, r.proc)
		}
		recorded[at] = r
	}
	return len(times)
}

// checkRefused checks that every execution process i held when it was
// paused, had begun to run and was run again elsewhere meanwhile, ended
// with its completion refused. (One whose completion the server was
// committing as the process stopped is simply complete, and one locked by
// its open transaction is not run elsewhere: see pause.)
func (c *schedCluster) checkRefused(runs []*schedRun, i int, held []*scheduler.Execution) {
	c.t.Helper()
	superseded := 0
	for _, h := range held {
		var mine *schedRun
		again := false
		for _, r := range runs {
			if r.task != h.Task || r.inst != h.Instance {
				continue
			}
			if r.version == h.Version && r.proc == i {
				mine = r
			}
			again = again || r.version > h.Version
		}
		if mine == nil || !again {
			continue
		}
		superseded++
		if o := c.outcome(mine); o != "refused" {
			c.t.Errorf("execution %s %s of the paused process (version %d), run again elsewhere: its late completion ended %q, want refused",
				h.Task, h.Instance, h.Version, o)
		}
	}
	c.t.Logf("%d of the %d executions the paused process held had begun and were run again elsewhere", superseded, len(held))
}

// summary counts the processes' outcomes, for the log.
func (c *schedCluster) summary() string {
	counts := map[string]int{}
	revived := 0
	for i := range 8 {
		if p := c.proc(i); p != nil {
			p.mu.Lock()
			for _, o := range p.outcomes {
				counts[o]++
			}
			revived += len(p.revived)
			p.mu.Unlock()
		}
	}
	return fmt.Sprintf("outcomes other than success: %v; dead executions revived: %d", counts, revived)
}
