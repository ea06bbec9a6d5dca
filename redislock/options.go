package redislock

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"

	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/registry"
)

// backend names Redis in metrics and logs.
const backend = "redis"

// Describe names the repository's backend ("redis"), region and client
// for the registry's metrics, spans and logs (registry.Describer). It does
// no I/O.
func (r *Repository) Describe() registry.Description {
	return registry.Description{Backend: backend, Region: r.cfg.region, Client: r.cfg.clientID}
}

var _ registry.Describer = (*Repository)(nil)

// Defaults of the options. The region is Spring Integration's JDBC
// default, so that a key means the same in both repositories' docs.
const (
	DefaultPrefix   = "lockreg:"
	DefaultRegion   = "DEFAULT"
	DefaultQueueTTL = time.Second
)

const (
	maxPrefixLen   = 64
	maxRegionLen   = 100
	maxClientIDLen = 64
)

// An Option configures [New]. New checks the options and returns an error
// wrapping [ErrInvalidOption], naming the option, for a bad value.
type Option func(*options)

type options struct {
	prefix     string
	region     string
	clientID   string
	clientSet  bool
	queueTTL   time.Duration
	onError    func(error)
	onErrorSet bool
	logger     *slog.Logger
	meters     metric.MeterProvider
}

// WithPrefix sets the prefix of every Redis key and of the channel the
// repository uses (default "lockreg:"). Repositories with different
// prefixes never see each other's locks. It must be 1 to 64 bytes of
// printable ASCII without spaces and without '{' or '}', which Redis
// Cluster reads as a hash tag: lockreg puts the hash tag itself (see the
// package documentation).
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithRegion sets the region (default "DEFAULT"), which partitions the
// locks of one prefix as jdbc's region partitions a lock table:
// repositories of different regions never see each other's locks. It must
// be 1 to 100 bytes of UTF-8 without NUL, ':', '{' or '}'.
func WithRegion(r string) Option { return func(o *options) { o.region = r } }

// WithClientID sets the client id, the identity that owns the leases this
// repository takes, stored as the value of each lock key (default: a new
// random UUID). Two repositories with the same id are one owner: each can
// renew and release the other's leases, so give every repository its own.
// It must be 1 to 64 bytes of UTF-8 without spaces or control characters.
func WithClientID(id string) Option {
	return func(o *options) { o.clientID, o.clientSet = id, true }
}

// WithQueueTTL sets how long a waiter keeps its place in a key's queue
// after its last attempt (default 1 s); see Repository.AcquireOrWait. A
// registry whose idle interval (registry.WithIdleBetweenTries) is longer
// loses its place between attempts, and a waiter that vanished without
// leaving holds the others up for at most this long, or for a lease handed
// to it in that time, for the lease's TTL. Make it a few times the idle
// interval. It must be positive.
func WithQueueTTL(d time.Duration) Option { return func(o *options) { o.queueTTL = d } }

// WithErrorHandler sets the function that receives the errors of the
// repository's background work, one call per failure: the pub/sub
// connection that hears released locks, which then reconnects with
// backoff. It is called from that goroutine and must not block. The default
// logs them to the logger of [WithLogger].
func WithErrorHandler(f func(error)) Option {
	return func(o *options) { o.onError, o.onErrorSet = f, true }
}

// WithLogger sets the logger of the background errors when no
// [WithErrorHandler] takes them (default: slog.Default() as it is when
// they occur). Records have the fields region, client and backend
// ("redis"), and err; a failure that repeats (the pub/sub connection
// reconnecting) is logged at most once per 10 s, with a count of the ones
// held back.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// config is the checked result of applying options.
type config struct {
	options
	// channel is where releases of the prefix and region are announced.
	channel string
	tel     *repoTel // nil without WithMeterProvider
}

func invalid(option, value, why string) error {
	return fmt.Errorf("%w: %s(%q): %s", ErrInvalidOption, option, value, why)
}

// newConfig applies and checks opts. It does no I/O.
func newConfig(opts []Option) (*config, error) {
	c := &config{options: options{prefix: DefaultPrefix, region: DefaultRegion, queueTTL: DefaultQueueTTL}}
	for _, opt := range opts {
		if opt != nil {
			opt(&c.options)
		}
	}
	if why := checkPrefix(c.prefix); why != "" {
		return nil, invalid("WithPrefix", c.prefix, "a prefix "+why)
	}
	if why := checkRegion(c.region); why != "" {
		return nil, invalid("WithRegion", c.region, "a region "+why)
	}
	if !c.clientSet {
		c.clientID = uuid.NewString()
	}
	if why := checkClientID(c.clientID); why != "" {
		return nil, invalid("WithClientID", c.clientID, "a client id "+why)
	}
	if c.queueTTL <= 0 {
		return nil, fmt.Errorf("%w: WithQueueTTL(%v): must be positive", ErrInvalidOption, c.queueTTL)
	}
	if c.onError == nil {
		if c.onErrorSet {
			return nil, fmt.Errorf("%w: WithErrorHandler(nil): the handler must not be nil", ErrInvalidOption)
		}
		log := tel.NewLogger(c.logger, tel.LogBackend, backend, tel.LogRegion, c.region, tel.LogClient, c.clientID)
		c.onError = func(err error) { log.Repeated("listener", "lockreg: redislock", err) }
	}
	c.channel = channelName(c.prefix, c.region)
	if err := c.newTelemetry(); err != nil {
		return nil, fmt.Errorf("%w: WithMeterProvider: %w", ErrInvalidOption, err)
	}
	return c, nil
}

// checkPrefix returns why p is not a valid prefix, or "".
func checkPrefix(p string) string {
	if p == "" || len(p) > maxPrefixLen {
		return fmt.Sprintf("must be 1 to %d bytes long", maxPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		if b := p[i]; b <= ' ' || b > '~' || b == '{' || b == '}' {
			return "must be printable ASCII without spaces, '{' or '}'"
		}
	}
	return ""
}

// checkRegion returns why r is not a valid region, or "".
func checkRegion(r string) string {
	switch {
	case r == "" || len(r) > maxRegionLen:
		return fmt.Sprintf("must be 1 to %d bytes long", maxRegionLen)
	case !utf8.ValidString(r):
		return "must be valid UTF-8"
	case strings.ContainsAny(r, "\x00:{}"):
		return "must not contain NUL, ':', '{' or '}'"
	}
	return ""
}

// checkClientID returns why id is not a valid client id, or "".
func checkClientID(id string) string {
	switch {
	case id == "" || len(id) > maxClientIDLen:
		return fmt.Sprintf("must be 1 to %d bytes long", maxClientIDLen)
	case !utf8.ValidString(id):
		return "must be valid UTF-8"
	case strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return "must not contain spaces or control characters"
	}
	return ""
}
