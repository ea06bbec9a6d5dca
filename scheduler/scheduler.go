package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockreg/lockreg/internal/backoff"
	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/internal/groupcommit"
)

var (
	// ErrStarted reports a second Start of a Scheduler.
	ErrStarted = errors.New("scheduler: already started")
	// ErrNotStarted reports a Stop of a Scheduler that was not started.
	ErrNotStarted = errors.New("scheduler: not started")
	// ErrLost is the cause of a handler's context when its execution was
	// taken from this scheduler: revived as dead by another, or unpicked
	// at Stop. Its completion will be refused.
	ErrLost = errors.New("scheduler: execution lost")
)

// Scheduler runs the executions of its tasks that are due, on Threads
// goroutines, across any number of processes sharing the table: each
// execution is picked by one scheduler at a time, by a version-guarded
// UPDATE (FOR UPDATE SKIP LOCKED on PostgreSQL and MySQL/MariaDB). It embeds
// the Client of its table. Create it with [New], then Start and Stop it
// once each.
type Scheduler struct {
	*Client
	cfg *settled
	tel *telemetry

	mu       sync.Mutex
	held     map[execKey]*running // picked by this scheduler, running or waiting
	busy     int                  // of held, how many run
	hintAt   time.Time            // the earliest due time told by hint, zero when none
	started  bool
	stopping chan struct{} // closed by Stop: pick nothing more

	queue    chan *running
	capacity chan struct{} // a held execution finished
	wakeup   chan struct{} // hintAt was set
	runCtx   context.Context
	cancel   context.CancelCauseFunc
	loops    sync.WaitGroup // fetch, liveness, listener
	workers  sync.WaitGroup
	live     chan struct{} // closed to stop the liveness loop, after the workers
	complete groupcommit.Batcher[*completion]
}

type execKey struct{ task, inst string }

// running is an execution this scheduler holds picked.
type running struct {
	e      *Execution
	task   *Task
	ctx    context.Context
	cancel context.CancelCauseFunc
	picked time.Time // host clock, for the schedule-to-start delay

	ending atomic.Bool // its completion is being written: heartbeats leave it
}

// New returns a scheduler of db's table for cfg.Tasks. It does no I/O;
// Start checks the table. It returns an error wrapping ErrInvalidConfig for
// a bad field of cfg or a task, or ErrUnknownDialect.
func New(db *sql.DB, cfg Config) (*Scheduler, error) {
	s, err := cfg.settle(db, true)
	if err != nil {
		return nil, err
	}
	sc := &Scheduler{Client: &Client{db: db, cfg: s, sql: s.compile()}, cfg: s,
		held: make(map[execKey]*running), stopping: make(chan struct{}), queue: make(chan *running, s.FetchLimit),
		capacity: make(chan struct{}, 1), wakeup: make(chan struct{}, 1), live: make(chan struct{})}
	if sc.tel, err = newTelemetry(s, sc.countDue); err != nil {
		return nil, err
	}
	sc.Client.wake = sc.hint
	// Up to Threads/2 completion writes in flight: the database's own
	// group commit joins their flushes; fewer left threads waiting.
	sc.complete = groupcommit.Batcher[*completion]{Max: max(2, s.Threads/2), MaxBatch: 100, Exec: sc.writeBatch}
	return sc, nil
}

// Name returns the name this scheduler writes to picked_by.
func (s *Scheduler) Name() string { return s.cfg.Name }

// Start checks the table, schedules the recurring tasks' executions by
// db-scheduler's rules (see Recurring), and starts picking; ctx bounds that
// start-up I/O only. It returns ErrStarted on a second call, and an error
// wrapping ErrNoTable when the table is missing.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return ErrStarted
	}
	s.started = true
	s.mu.Unlock()
	err := dialect.SelectNothing(ctx, s.db, `SELECT `+columns+` FROM `+s.cfg.Table+` WHERE 1 = 0`)
	if err != nil {
		err = s.cfg.wrap(ctx, s.db, "scheduler: start: check table", err)
	} else {
		err = s.startRecurring(ctx)
	}
	if err != nil {
		s.mu.Lock()
		s.started = false
		s.mu.Unlock()
		return err
	}
	s.runCtx, s.cancel = context.WithCancelCause(context.Background())
	for range s.cfg.Threads {
		s.workers.Add(1)
		go s.work()
	}
	s.loops.Add(2)
	go s.fetchLoop()
	go s.livenessLoop()
	if s.cfg.Listener != nil {
		s.loops.Add(1)
		go s.listen()
	}
	s.hint(time.Now())
	return nil
}

// Stop stops picking, waits until the running executions end or ctx is
// done, and then unpicks every execution this scheduler still holds, so
// that other schedulers run them at once (on PostgreSQL with a Listener
// they are told to). Handlers still running are cancelled with cause
// ErrLost, and their completions refused. It returns ctx's error when ctx
// ended first, and ErrNotStarted before Start. A handler that ignores its
// context keeps its goroutine until it returns.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.runCtx == nil {
		s.mu.Unlock()
		return ErrNotStarted
	}
	select {
	case <-s.stopping:
		s.mu.Unlock()
		return nil
	default:
	}
	close(s.stopping)
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	var err error
	var abandoned []*running
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		// Taken from held before the handlers are cancelled, so that
		// their completions are not written: they are unpicked instead.
		abandoned = s.takeHeld()
		s.cancel(ErrLost)
	}
	close(s.live)
	s.loops.Wait() // the fetch loop has handed all it picked to held
	n := s.unpick(append(abandoned, s.takeHeld()...))
	if n > 0 && s.cfg.d.Name == "postgres" && !s.cfg.NoNotify {
		s.notifyHandOff()
	}
	if err == nil {
		s.cancel(ErrLost)
	}
	s.tel.close()
	return err
}

// hint tells the fetch loop that an execution is due at at.
func (s *Scheduler) hint(at time.Time) {
	s.mu.Lock()
	if s.hintAt.IsZero() || at.Before(s.hintAt) {
		s.hintAt = at
	}
	s.mu.Unlock()
	select {
	case s.wakeup <- struct{}{}:
	default:
	}
}

// room returns how many executions the next fetch may pick, 0 while
// enough wait for a thread.
func (s *Scheduler) room() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if waiting := len(s.held) - s.busy; waiting > s.cfg.Threads/2 {
		return 0
	}
	return s.cfg.FetchLimit - len(s.held)
}

// fetchLoop picks due executions while there is room, and otherwise waits
// for room, a hint, or the next due time (at most PollInterval).
func (s *Scheduler) fetchLoop() {
	defer s.loops.Done()
	retry := backoff.New(100*time.Millisecond, s.cfg.PollInterval)
	timer := time.NewTimer(0)
	defer timer.Stop()
	exhausted := false
	deadline := time.Now()
	var lost time.Duration // the wait after picks that found due rows all locked by others
	for {
		select {
		case <-s.stopping:
			return
		default:
		}
		if n := s.room(); n > 0 && !exhausted {
			got, err := s.pick(n)
			if err != nil {
				s.tel.fetchFailed(err)
				if !backoff.Sleep(context.Background(), retry.Next(), s.stopping) {
					return
				}
				continue
			}
			retry.Reset()
			if got > 0 {
				lost = 0
			} else {
				lost = min(max(2*lost, 10*time.Millisecond), s.cfg.PollInterval)
			}
			if got < n {
				exhausted = true
				// A wake-up pending already makes the next due time moot.
				if deadline = time.Now().Add(s.pollWait()); len(s.wakeup) == 0 {
					deadline = s.nextDue()
				}
				// Rows due but skipped are being picked by other schedulers,
				// whose transactions have not committed: look again after a
				// growing wait (or a wake-up), not at once in a loop.
				if got == 0 {
					deadline = later(deadline, time.Now().Add(lost))
				}
				timer.Reset(time.Until(deadline))
			}
			continue
		}
		select {
		case <-s.stopping:
			return
		case <-s.capacity:
		case <-s.wakeup:
			s.mu.Lock()
			at := s.hintAt
			s.hintAt = time.Time{}
			s.mu.Unlock()
			if !at.After(time.Now()) {
				exhausted = false
			} else if at.Before(deadline) {
				deadline = at
				timer.Reset(time.Until(deadline))
			}
		case <-timer.C:
			exhausted = false
			deadline = time.Now().Add(s.pollWait())
		}
	}
}

// pollWait is PollInterval less up to a tenth at random, so that
// schedulers started together do not poll in step.
func (s *Scheduler) pollWait() time.Duration {
	p := s.cfg.PollInterval
	return p - rand.N(p/10+1)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// work runs held executions until Stop.
func (s *Scheduler) work() {
	defer s.workers.Done()
	for {
		select {
		case <-s.stopping:
			return
		case r := <-s.queue:
			select {
			case <-s.stopping: // Stop won the race: r stays held, to be unpicked
				return
			default:
			}
			s.mu.Lock()
			s.busy++
			s.mu.Unlock()
			s.execute(r)
		}
	}
}

// takeHeld removes and returns every held execution.
func (s *Scheduler) takeHeld() []*running {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]*running, 0, len(s.held))
	for k, r := range s.held {
		all = append(all, r)
		delete(s.held, k)
	}
	return all
}

// holds reports whether r is still held: Stop has not abandoned it.
func (s *Scheduler) holds(r *running) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[execKey{r.e.Task, r.e.Instance}] == r
}

// release forgets a held execution once its completion is written or
// refused.
func (s *Scheduler) release(r *running) {
	s.mu.Lock()
	if s.held[execKey{r.e.Task, r.e.Instance}] == r {
		delete(s.held, execKey{r.e.Task, r.e.Instance})
	}
	s.busy--
	s.mu.Unlock()
	r.cancel(nil)
	select {
	case s.capacity <- struct{}{}:
	default:
	}
}

// ioCtx bounds the scheduler's own statements, which Stop does not cancel:
// a statement cut short could leave rows picked by nobody who knows it.
func ioCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

func (s *Scheduler) String() string {
	return fmt.Sprintf("scheduler %s on %s", s.cfg.Name, s.cfg.Table)
}
