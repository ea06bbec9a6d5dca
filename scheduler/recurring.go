package scheduler

import (
	"context"
	"errors"
	"time"
)

// startRecurring gives each Recurring task its execution as db-scheduler's
// ScheduleRecurringOnStartup does: it inserts a missing one at the
// schedule's first time; it leaves a picked one, and one due within 10 s,
// alone; it moves an unpicked one whose time differs from the schedule's
// next by more than a second (a fixed delay only when the stored time is
// later than now plus the delay: a shorter delay takes effect at once); and
// it removes an unpicked one when the schedule is Disabled.
func (s *Scheduler) startRecurring(ctx context.Context) error {
	for i := range s.cfg.Tasks {
		t := &s.cfg.Tasks[i]
		if !t.recurring {
			continue
		}
		if err := s.startOne(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func (s *Scheduler) startOne(ctx context.Context, t *Task) error {
	now := time.Now()
	inst := Instance{Task: t.name, ID: RecurringInstance, Data: t.data}
	e, err := s.Get(ctx, t.name, RecurringInstance)
	switch {
	case errors.Is(err, ErrNotFound):
		if t.schedule == Disabled {
			return nil
		}
		_, err := s.ScheduleIfNotExists(ctx, inst, t.schedule.Initial(now))
		return err
	case err != nil:
		return err
	case e.Picked:
		return nil
	case t.schedule == Disabled:
		err := s.Cancel(ctx, t.name, RecurringInstance)
		if err == nil {
			s.cfg.Logger.Info("scheduler: recurring task disabled: its execution is removed", "task", t.name)
		}
		return ignorePicked(err)
	case e.Time.Before(now.Add(10 * time.Second)):
		return nil
	}
	want := t.schedule.Initial(now)
	if fd, ok := t.schedule.(fixedDelay); ok {
		if !e.Time.After(now.Add(time.Duration(fd))) {
			return nil
		}
		want = now.Add(time.Duration(fd))
	} else if d := e.Time.Sub(want); d <= time.Second && d >= -time.Second {
		return nil
	}
	err = s.Reschedule(ctx, Instance{Task: t.name, ID: RecurringInstance}, want)
	if err == nil {
		s.cfg.Logger.Info("scheduler: recurring task's schedule changed: its execution is moved", "task", t.name,
			"from", e.Time, "to", want)
	}
	return ignorePicked(err)
}

// ignorePicked ignores the errors of an execution that another scheduler
// picked or completed meanwhile: it is that one's now.
func ignorePicked(err error) error {
	if errors.Is(err, ErrPicked) || errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
