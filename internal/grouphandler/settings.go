package grouphandler

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/registry"
)

// Settings are the settings every group handler has. Each field means what
// the same-named field of aggregator.Config and resequencer.Config says.
// A handler's New passes them to [New] once, as its user set them; the
// [Core] applies the defaults and is then their only holder.
type Settings struct {
	Publisher                    message.Publisher
	OutputTopic                  string
	Store                        groupstore.Store
	Locks                        registry.LockRegistry
	LockPrefix                   string
	LockTimeout                  time.Duration
	Correlation                  func(*message.Message) string
	MessageID                    func(*message.Message) string
	GroupTimeout                 time.Duration
	GroupTimeoutFunc             func(groupstore.Group, *message.Message) time.Duration
	MinimumTimeoutForEmptyGroups time.Duration
	PollInterval                 time.Duration
	DiscardPublisher             message.Publisher
	DiscardTopic                 string
	Logger                       watermill.LoggerAdapter
	MeterProvider                metric.MeterProvider
	TracerProvider               trace.TracerProvider
}

// Defaults are a handler package's defaults of the settings whose default
// differs between handlers, as the package documents and exports them.
type Defaults struct {
	LockPrefix   string
	LockTimeout  time.Duration
	PollInterval time.Duration
	// CorrelationIDKey is the metadata key the default Correlation reads.
	CorrelationIDKey string
}

// setDefaults fills in the zero fields with d and the defaults that all
// handlers share. It leaves Logger to [New].
func (s *Settings) setDefaults(d Defaults) {
	if s.Store == nil {
		s.Store = groupstore.NewMemory()
	}
	if _, ok := s.Store.(groupstore.Locker); s.Locks == nil && !ok {
		s.Locks = newLocal() // a store that cannot lock its groups: in-process locks
	}
	if s.LockPrefix == "" {
		s.LockPrefix = d.LockPrefix
	}
	if s.LockTimeout == 0 {
		s.LockTimeout = d.LockTimeout
	}
	if s.Correlation == nil {
		key := d.CorrelationIDKey
		s.Correlation = func(m *message.Message) string { return m.Metadata.Get(key) }
	}
	if s.MessageID == nil {
		s.MessageID = func(m *message.Message) string { return m.UUID }
	}
	if s.PollInterval == 0 {
		s.PollInterval = d.PollInterval
	}
	if s.DiscardTopic != "" && s.DiscardPublisher == nil {
		s.DiscardPublisher = s.Publisher
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
func (s Settings) CheckPublishing(p *Problems) {
	_, outbox := s.Store.(groupstore.Outbox)
	if s.Publisher == nil && !outbox {
		p.Add("Publisher is required unless Store is a groupstore.Outbox")
	}
	if s.DiscardTopic != "" && s.DiscardPublisher == nil && s.Publisher == nil {
		p.Add("DiscardTopic needs a DiscardPublisher or a Publisher")
	}
	if s.OutputTopic == "" {
		p.Add("OutputTopic is required")
	}
	if s.DiscardPublisher != nil && s.DiscardTopic == "" {
		p.Add("DiscardPublisher needs a DiscardTopic")
	}
}

// CheckDurations records negative durations, and a GroupTimeout given
// with a GroupTimeoutFunc.
func (s Settings) CheckDurations(p *Problems) {
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"LockTimeout", s.LockTimeout}, {"PollInterval", s.PollInterval},
		{"GroupTimeout", s.GroupTimeout}, {"MinimumTimeoutForEmptyGroups", s.MinimumTimeoutForEmptyGroups},
	} {
		if d.d < 0 {
			p.Add("%s must not be negative, not %v", d.name, d.d)
		}
	}
	s.checkTimeouts(p)
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
