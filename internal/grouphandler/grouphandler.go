// Package grouphandler is the machinery shared by the aggregator and the
// resequencer: Watermill handlers that keep message groups in a
// groupstore.Store, change each group only under its lock in a
// registry.LockRegistry, and expire due groups with a timeout runner tied
// to the handler's subscription.
//
// A [Core] does the work that does not depend on what a handler makes of a
// group: defaults and checks of the shared [Settings] (settings.go), the
// group lock with a bounded wait and a watch on its hold (lock.go), adding
// messages, releases with or without an Outbox, discards and output UUIDs
// (group.go), and the timeout runner (runner.go). A handler describes
// itself with a [Kind]: errors and log fields name its package, and errors
// wrap that package's sentinels, so the split is invisible to callers.
package grouphandler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/groupstore"
	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/registry"
)

// Kind is what a [Core] knows of the handler package it works for. Every
// field is required: [New] panics without one.
type Kind struct {
	// Name is the handler's package name. It prefixes errors, keys the
	// handler name in logs and seeds the output UUID namespace.
	Name string
	// DiscardReasonKey is the metadata key of a discarded message's reason.
	DiscardReasonKey string
	// Defaults are the package's defaults of the settings that have one.
	Defaults Defaults
	// Errors are the package's sentinels, which the Core's errors wrap.
	Errors Errors
}

// Errors are a handler package's sentinel errors.
type Errors struct {
	// NoCorrelationKey and NoMessageID report a message that Identify
	// cannot place.
	NoCorrelationKey error
	NoMessageID      error
	// LockTimeout reports a group lock not taken within its wait.
	LockTimeout error
	// LockLost reports that a group lock's hold ended, or may have ended,
	// before the work on the group was done.
	LockLost error
}

// Core is the shared part of one handler. Make one with [New]; it is safe
// for concurrent use once the handler runs.
type Core struct {
	kind Kind
	// s holds the handler's shared settings, defaulted; nothing changes
	// them after New.
	s         Settings
	namespace uuid.UUID

	// logger is s.Logger, or until AddHandler replaces it the slog
	// default, with the handler name added by AddHandler. AddHandler runs
	// before the handler does, so no lock guards it.
	logger watermill.LoggerAdapter

	// locker is the store, when it locks groups itself and no registry
	// was given (Settings.Locks nil): WithLock then runs work in its
	// Locked calls instead of under a registry lease.
	locker groupstore.Locker
	// prober is the store, when it is the locker and its Add probes in
	// the same step (groupstore.Prober.Probes): AddThen's probing Add.
	prober groupstore.Prober

	// watch ends the work of holds whose group lock was lost.
	watch watcher

	// tel records metrics and spans; nil when the handler reports none.
	tel *handlerTel
	// limit holds back repeated failures of the timeout runner in logs.
	limit tel.Limiter

	// defaults is the note on the in-memory defaults New applied, "" if
	// none; noted makes announce log it once.
	defaults string
	noted    sync.Once
}

// New returns the core of a handler of kind k with the settings s, which
// the caller has checked, after applying the defaults. It panics if a field
// of k is missing, a programmer error.
func New(k Kind, s Settings) *Core {
	d, e := k.Defaults, k.Errors
	if k.Name == "" || k.DiscardReasonKey == "" ||
		d.LockPrefix == "" || d.LockTimeout <= 0 || d.PollInterval <= 0 || d.CorrelationIDKey == "" ||
		e.NoCorrelationKey == nil || e.NoMessageID == nil || e.LockTimeout == nil || e.LockLost == nil {
		panic(fmt.Sprintf("grouphandler: incomplete kind %+v", k))
	}
	_, storeLocks := s.Store.(groupstore.Locker)
	defaults := defaultsNote(k.Name, s.Store == nil, s.Locks == nil && !storeLocks)
	s.setDefaults(k.Defaults)
	logger := s.Logger
	if logger == nil {
		var l *slog.Logger // slog's default
		if r, ok := s.Locks.(*registry.Registry); ok {
			l = r.Logger()
		}
		logger = watermill.NewSlogLogger(l)
	}
	t := newTelemetry(k.Name, s)
	raw := s.Store
	s.Store = timed(s.Store, t)
	var (
		locker groupstore.Locker
		prober groupstore.Prober
	)
	if s.Locks == nil { // setDefaults left it so: the store locks groups itself
		locker = s.Store.(groupstore.Locker)
		if p, ok := raw.(groupstore.Prober); ok && p.Probes() {
			prober = timedProber(s.Store, p)
		}
	}
	return &Core{
		locker:   locker,
		prober:   prober,
		kind:     k,
		s:        s,
		tel:      t,
		limit:    tel.Limiter{Interval: tel.RepeatInterval},
		logger:   logger,
		defaults: defaults,
		// The namespace differs per kind so that an aggregator and a
		// resequencer never give two different outputs one UUID.
		namespace: uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lockreg/lockreg/"+k.Name)),
	}
}

// AddHandler adds handle to r as a consumer handler named handlerName on
// subscribeTopic, and runs runTimeouts for as long as the handler's
// subscription lives. Without a Settings.Logger the core adopts r's logger.
func (c *Core) AddHandler(r *message.Router, handlerName, subscribeTopic string, sub message.Subscriber,
	handle message.NoPublishHandlerFunc, runTimeouts func(context.Context) error) *message.Handler {
	if c.s.Logger == nil {
		c.logger = r.Logger()
	}
	c.logger = c.logger.With(watermill.LogFields{c.kind.Name: handlerName})
	c.tel.setName(handlerName)
	c.announce()
	return r.AddConsumerHandler(handlerName, subscribeTopic, &runnerSubscriber{Subscriber: sub, run: runTimeouts}, handle)
}

// Logger returns the handler's logger.
func (c *Core) Logger() watermill.LoggerAdapter { return c.logger }

// defaultsNote is the note logged when a handler of kind name starts
// without a Store (noStore) or Locks (noLocks), or "" if it has both.
func defaultsNote(name string, noStore, noLocks bool) string {
	switch {
	case noStore && noLocks:
		return "No Config.Store or Config.Locks: the " + name + " keeps its groups in memory and locks them in this process; it is single-instance and loses its groups on restart"
	case noStore:
		return "No Config.Store: the " + name + " keeps its groups in this process's memory; they are not shared with other instances and are lost on restart"
	case noLocks:
		return "No Config.Locks: the " + name + " locks groups in this process only; instances sharing its Store do not take turns on a group"
	}
	return ""
}

// announce logs, at info level and once per handler, that it runs on
// in-memory defaults. It is called where the handler starts: AddHandler,
// after adopting the router's logger, or else the first Identify (Handle)
// or RunTimeouts.
func (c *Core) announce() {
	c.noted.Do(func() {
		if c.defaults != "" {
			c.logger.Info(c.defaults, nil)
		}
	})
}

// Identify returns the correlation key and the id of msg, or an error
// wrapping Errors.NoCorrelationKey or Errors.NoMessageID.
func (c *Core) Identify(msg *message.Message) (key, id string, err error) {
	c.announce()
	key = c.s.Correlation(msg)
	if key == "" {
		return "", "", fmt.Errorf("%w: message %s", c.kind.Errors.NoCorrelationKey, msg.UUID)
	}
	id = c.s.MessageID(msg)
	if id == "" {
		return "", "", fmt.Errorf("%w: message %s", c.kind.Errors.NoMessageID, msg.UUID)
	}
	return key, id, nil
}
