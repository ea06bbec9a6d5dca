package grouphandler

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/registry"
)

// Config holds the settings every group handler has. The fields mean what
// the same-named fields of aggregator.Config and resequencer.Config say.
type Config struct {
	Publisher                    message.Publisher
	OutputTopic                  string
	Store                        groupstore.Store
	Locks                        registry.LockRegistry
	LockPrefix                   string
	LockTimeout                  time.Duration
	Correlation                  func(*message.Message) string
	MessageID                    func(*message.Message) string
	GroupTimeout                 time.Duration
	MinimumTimeoutForEmptyGroups time.Duration
	PollInterval                 time.Duration
	DiscardPublisher             message.Publisher
	DiscardTopic                 string
	Logger                       watermill.LoggerAdapter
}

// setDefaults fills in the zero fields with the defaults of k, which its
// package documents and exports.
func (c *Config) setDefaults(k Kind) {
	if c.Store == nil {
		c.Store = groupstore.NewMemory()
	}
	if c.Locks == nil {
		c.Locks = newLocal()
	}
	if c.LockPrefix == "" {
		c.LockPrefix = k.DefaultLockPrefix
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = k.DefaultLockTimeout
	}
	if c.Correlation == nil {
		c.Correlation = func(m *message.Message) string { return m.Metadata.Get(k.CorrelationIDKey) }
	}
	if c.MessageID == nil {
		c.MessageID = func(m *message.Message) string { return m.UUID }
	}
	if c.PollInterval == 0 {
		c.PollInterval = k.DefaultPollInterval
	}
	if c.DiscardTopic != "" && c.DiscardPublisher == nil {
		c.DiscardPublisher = c.Publisher
	}
}

// Problems collects the problems of a configuration. Each wraps Invalid,
// the ErrInvalidConfig of the handler's package, so that callers match the
// sentinel of the package they use.
type Problems struct {
	Invalid error
	errs    []error
}

// Add records a problem described by format and args.
func (p *Problems) Add(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%w: "+format, append([]any{p.Invalid}, args...)...))
}

// Err joins the recorded problems, or returns nil if there are none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }

// CheckPublishing records missing or inconsistent publishing settings. It
// is split from CheckDurations so that a handler can report its own
// problems in between, in the order of its fields.
func (c Config) CheckPublishing(p *Problems) {
	_, outbox := c.Store.(groupstore.Outbox)
	if c.Publisher == nil && !outbox {
		p.Add("Publisher is required unless Store is a groupstore.Outbox")
	}
	if c.DiscardTopic != "" && c.DiscardPublisher == nil && c.Publisher == nil {
		p.Add("DiscardTopic needs a DiscardPublisher or a Publisher")
	}
	if c.OutputTopic == "" {
		p.Add("OutputTopic is required")
	}
	if c.DiscardPublisher != nil && c.DiscardTopic == "" {
		p.Add("DiscardPublisher needs a DiscardTopic")
	}
}

// CheckDurations records negative durations.
func (c Config) CheckDurations(p *Problems) {
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"LockTimeout", c.LockTimeout}, {"PollInterval", c.PollInterval},
		{"GroupTimeout", c.GroupTimeout}, {"MinimumTimeoutForEmptyGroups", c.MinimumTimeoutForEmptyGroups},
	} {
		if d.d < 0 {
			p.Add("%s must not be negative, not %v", d.name, d.d)
		}
	}
}

// newLocal returns an in-process registry with the default options, which
// cannot be invalid.
func newLocal() *registry.Registry {
	r, err := registry.NewLocal()
	if err != nil {
		panic(err) // a bug: the defaults are valid
	}
	return r
}
