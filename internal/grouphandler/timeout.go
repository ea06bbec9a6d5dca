package grouphandler

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
)

// Schedule is what Settings.GroupTimeoutFunc made of a group: whether the
// handler must change the group's due time (Set), and to what.
type Schedule struct {
	// Set is false when the handler has no GroupTimeoutFunc: the constant
	// GroupTimeout, if any, was applied by Add.
	Set bool
	// Now asks for the group to expire at once, under the lock that is
	// held (the function returned a negative duration).
	Now bool
	// Update sets the due time (Timeout) or clears it (ClearTimeout); it
	// holds no IfVersion. Only meaningful when Set and not Now.
	Update groupstore.Update
}

// ScheduleFor evaluates Settings.GroupTimeoutFunc for g, the group as it
// is once the handler is done with the message latest (nil when none):
// a positive result makes the group due that long from the store's now,
// zero clears its due time (no timeout; Spring's null), a negative one
// expires it now.
func (c *Core) ScheduleFor(g groupstore.Group, latest *message.Message) Schedule {
	fn := c.s.GroupTimeoutFunc
	if fn == nil {
		return Schedule{}
	}
	g.Messages = nil // the function is documented to see no messages
	switch d := fn(g, latest); {
	case d < 0:
		return Schedule{Set: true, Now: true}
	case d == 0:
		return Schedule{Set: true, Update: groupstore.Update{ClearTimeout: true}}
	default:
		return Schedule{Set: true, Update: groupstore.Update{Timeout: d}}
	}
}

// Reschedule records s (from ScheduleFor, Set and not Now) for sg, whose
// version it checks; call it under the group lock.
func (c *Core) Reschedule(ctx context.Context, sg groupstore.Group, s Schedule) error {
	if err := c.checkHold(ctx, "scheduling the timeout of", sg.Key); err != nil {
		return err
	}
	u := s.Update
	u.IfVersion = sg.Version
	if err := c.store(ctx).Update(ctx, sg.Key, u); err != nil {
		return fmt.Errorf("%s: scheduling the timeout of group %q: %w", c.kind.Name, sg.Key, err)
	}
	return nil
}

// TimeoutConfigured reports whether groups can time out: a positive
// GroupTimeout or a GroupTimeoutFunc.
func (s Settings) TimeoutConfigured() bool { return s.GroupTimeout > 0 || s.GroupTimeoutFunc != nil }

// checkTimeouts records a GroupTimeout given with a GroupTimeoutFunc:
// as in Spring, they are exclusive.
func (s Settings) checkTimeouts(p *Problems) {
	if s.GroupTimeout != 0 && s.GroupTimeoutFunc != nil {
		p.Add("GroupTimeout and GroupTimeoutFunc are mutually exclusive, set one")
	}
}
