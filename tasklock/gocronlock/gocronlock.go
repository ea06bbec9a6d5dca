// Package gocronlock adapts [tasklock] to go-co-op/gocron v2's distributed
// locker, so that jobs of schedulers in several instances run at most once
// at a time on lockreg's lock table:
//
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(
//		gocronlock.New(executor, tasklock.LockAtLeastFor(50*time.Second))))
//
// gocron passes the job's name as the key; give jobs explicit names
// (gocron.WithName) that are the same in every instance. gocron calls the
// locker when a job is due and skips the run when Lock returns an error, so
// an instance that finds the lock held skips at once. Because schedulers'
// ticks differ by a little, set lockAtLeastFor a little shorter than the
// job's interval: a short job finished by one instance is then not run
// again by another whose tick comes later.
//
// gocron does not pass the lock to the job, so [tasklock.AssertLocked] and
// [tasklock.Extend] are not available inside gocron jobs; use
// [tasklock.Executor.Run] in the job for those.
package gocronlock

import (
	"context"

	"github.com/go-co-op/gocron/v2"

	"github.com/lockreg/lockreg/tasklock"
)

// New returns a gocron.Locker that takes each job's lock in e with opts
// (lockAtMostFor, lockAtLeastFor) and never waits: when the lock is held
// elsewhere, Lock returns an error wrapping [tasklock.ErrLocked] and gocron
// skips the run. The returned lock's Unlock releases it honouring
// lockAtLeastFor, and is not cancelled with the job's context.
func New(e *tasklock.Executor, opts ...tasklock.Option) gocron.Locker {
	return locker{e: e, opts: opts}
}

type locker struct {
	e    *tasklock.Executor
	opts []tasklock.Option
}

func (l locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	tl, err := l.e.TryLock(ctx, key, l.opts...)
	if err != nil {
		return nil, err
	}
	return lock{tl}, nil
}

type lock struct{ l *tasklock.Lock }

func (l lock) Unlock(ctx context.Context) error {
	// gocron passes the job's context, cancelled when the scheduler shuts
	// down; the release must still happen.
	return l.l.Unlock(context.WithoutCancel(ctx))
}
