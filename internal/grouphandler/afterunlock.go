package grouphandler

import (
	"context"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/groupstore"
)

// deferredKey is the context key of the work deferred past a group lock.
type deferredKey struct{}

// deferred collects the functions AfterUnlock registered under one lock.
type deferred struct{ fns []func(context.Context) error }

// AfterUnlock makes fn run once the group lock that the work on ctx holds
// has been released: WithLock (and the timeout runner) calls it, with the
// context it was given rather than the lock's, after the unlock, if the
// work returned nil, and returns its error. Nothing guards fn but what it
// checks itself (the group's version). It panics outside such work, a
// programmer error.
func AfterUnlock(ctx context.Context, fn func(context.Context) error) {
	d, ok := ctx.Value(deferredKey{}).(*deferred)
	if !ok {
		panic("grouphandler: AfterUnlock outside the work of a group lock")
	}
	d.fns = append(d.fns, fn)
}

// thenDeferred runs locked, which takes and releases a group lock, on a
// context that AfterUnlock can register on, then what was registered.
func thenDeferred(ctx context.Context, locked func(context.Context) error) error {
	d := &deferred{}
	if err := locked(context.WithValue(ctx, deferredKey{}, d)); err != nil {
		return err
	}
	for _, fn := range d.fns {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close marks sg complete without releasing its messages, conditional on
// its version, and makes it due after retry, so that the timeout runner
// finishes the release if nobody else does; call it under the group lock.
// It returns sg as it is then, without reading it again. A complete group
// that holds messages is a release in flight: Add rejects new messages to
// it as late and has the handler look at it on a redelivery.
func (c *Core) Close(ctx context.Context, sg groupstore.Group, retry time.Duration) (groupstore.Group, error) {
	if err := c.checkHold(ctx, "closing", sg.Key); err != nil {
		return sg, err
	}
	if err := c.store(ctx).Update(ctx, sg.Key, groupstore.Update{IfVersion: sg.Version, Complete: true, Timeout: retry}); err != nil {
		return sg, fmt.Errorf("%s: closing group %q: %w", c.kind.Name, sg.Key, err)
	}
	sg.Version++
	sg.Complete = true
	return sg, nil
}
