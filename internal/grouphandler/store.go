package grouphandler

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	tel "github.com/lockreg/lockreg/internal/telemetry"
)

// The store operations whose durations a timedStore records.
const (
	opAdd = iota
	opGet
	opUpdate
	opRemove
	opClaimDue
	opUpdatePublish
	opLocked
	nOps
)

var opNames = [nOps]string{"add", "get", "update", "remove", "claim_due", "update_publish", "locked"}

// timedStore records the duration of each call of a group store.
type timedStore struct {
	groupstore.Store
	t     *handlerTel
	attrs [nOps][2]tel.Attrs // by operation: ok, error
}

// timedOutbox is a timedStore of an Outbox.
type timedOutbox struct {
	*timedStore
	ob groupstore.Outbox
}

// timedLocker is a timedStore of a Locker: it times each Locked call as a
// whole and the calls of the store fn gets.
type timedLocker struct {
	*timedStore
	l groupstore.Locker
}

// timedLockerOutbox is a timedLocker of an Outbox.
type timedLockerOutbox struct {
	timedOutbox
	l groupstore.Locker
}

// timed returns s recording its durations with t's instruments, an
// Outbox if s is one and a Locker if s is one; s itself without
// instruments.
func timed(s groupstore.Store, t *handlerTel) groupstore.Store {
	if t.metrics() == nil {
		return s
	}
	ts := &timedStore{Store: s, t: t}
	for op, name := range opNames {
		ts.attrs[op] = [2]tel.Attrs{
			t.with(tel.Operation.String(name), tel.Outcome.String("ok")),
			t.with(tel.Operation.String(name), tel.Outcome.String("error")),
		}
	}
	return ts.like(s)
}

// like returns ts's instruments on s, an Outbox and a Locker as s is.
func (ts *timedStore) like(s groupstore.Store) groupstore.Store {
	ts = &timedStore{Store: s, t: ts.t, attrs: ts.attrs}
	ob, isOutbox := s.(groupstore.Outbox)
	l, isLocker := s.(groupstore.Locker)
	switch {
	case isOutbox && isLocker:
		return timedLockerOutbox{timedOutbox{ts, ob}, l}
	case isOutbox:
		return timedOutbox{ts, ob}
	case isLocker:
		return timedLocker{ts, l}
	}
	return ts
}

func (ts *timedStore) locked(ctx context.Context, l groupstore.Locker, key string, fn func(context.Context, groupstore.Store) error) error {
	start := time.Now()
	err := l.Locked(ctx, key, func(ctx context.Context, tx groupstore.Store) error { return fn(ctx, ts.like(tx)) })
	ts.record(ctx, opLocked, start, err)
	return err
}

func (s timedLocker) Locked(ctx context.Context, key string, fn func(context.Context, groupstore.Store) error) error {
	return s.locked(ctx, s.l, key, fn)
}

func (s timedLockerOutbox) Locked(ctx context.Context, key string, fn func(context.Context, groupstore.Store) error) error {
	return s.locked(ctx, s.l, key, fn)
}

func (s *timedStore) record(ctx context.Context, op int, start time.Time, err error) {
	o := 0
	if err != nil && !errors.Is(err, groupstore.ErrNotFound) {
		o = 1
	}
	s.t.m.store.Record(context.WithoutCancel(ctx), tel.Since(start), s.attrs[op][o].Record...)
}

func (s *timedStore) Add(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration) (groupstore.Group, groupstore.Outcome, error) {
	start := time.Now()
	g, o, err := s.Store.Add(ctx, key, msg, timeout)
	s.record(ctx, opAdd, start, err)
	return g, o, err
}

func (s *timedStore) Get(ctx context.Context, key string) (groupstore.Group, error) {
	start := time.Now()
	g, err := s.Store.Get(ctx, key)
	s.record(ctx, opGet, start, err)
	return g, err
}

func (s *timedStore) Update(ctx context.Context, key string, u groupstore.Update) error {
	start := time.Now()
	err := s.Store.Update(ctx, key, u)
	s.record(ctx, opUpdate, start, err)
	return err
}

func (s *timedStore) Remove(ctx context.Context, key string, version int64) error {
	start := time.Now()
	err := s.Store.Remove(ctx, key, version)
	s.record(ctx, opRemove, start, err)
	return err
}

func (s *timedStore) ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]groupstore.DueGroup, error) {
	start := time.Now()
	due, err := s.Store.ClaimDue(ctx, limit, lease)
	s.record(ctx, opClaimDue, start, err)
	return due, err
}

func (s timedOutbox) UpdatePublish(ctx context.Context, key string, u groupstore.Update, topic string, msgs ...*message.Message) error {
	start := time.Now()
	err := s.ob.UpdatePublish(ctx, key, u, topic, msgs...)
	s.record(ctx, opUpdatePublish, start, err)
	return err
}

// probeTimer is a Prober whose AddProbe a timedStore records as an add.
type probeTimer struct {
	*timedStore
	p groupstore.Prober
}

// timedProber returns p recording its AddProbe calls as adds with the
// instruments of timed, the timed store of p; p itself without them.
func timedProber(timed groupstore.Store, p groupstore.Prober) groupstore.Prober {
	var ts *timedStore
	switch s := timed.(type) {
	case *timedStore:
		ts = s
	case timedOutbox:
		ts = s.timedStore
	case timedLocker:
		ts = s.timedStore
	case timedLockerOutbox:
		ts = s.timedStore
	}
	if ts == nil {
		return p
	}
	return probeTimer{ts, p}
}

func (s probeTimer) Probes() bool { return s.p.Probes() }

func (s probeTimer) AddProbe(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration, pr groupstore.Probe) (groupstore.Group, groupstore.Outcome, bool, error) {
	start := time.Now()
	g, o, fits, err := s.p.AddProbe(ctx, key, msg, timeout, pr)
	s.record(ctx, opAdd, start, err)
	return g, o, fits, err
}
