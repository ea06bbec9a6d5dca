package telemetry

import (
	"log/slog"
	"sync"
	"time"
)

// The keys of the fields every lockreg log record has where they apply, so
// that one query finds all records of a key, region, client or backend.
const (
	LogKey        = "key"
	LogRegion     = "region"
	LogClient     = "client"
	LogBackend    = "backend"
	LogErr        = "err"
	LogSuppressed = "suppressed" // failures of the kind held back since the last record
)

// RepeatInterval is the least time between two records of one kind of
// repeated failure (a transient error retried, a listener reconnecting).
const RepeatInterval = 10 * time.Second

// Logger is a [slog.Logger] with fields that every record gets and a rate
// limit for repeated failures. The zero value logs to slog.Default() as it
// is at each call. It is safe for concurrent use.
type Logger struct {
	l      *slog.Logger // nil: slog.Default() at each call
	fields []any
	limit  Limiter
}

// NewLogger returns a Logger that logs to l (slog.Default(), as it is at
// each call, when nil) with fields added to every record.
func NewLogger(l *slog.Logger, fields ...any) *Logger {
	return &Logger{l: l, fields: fields, limit: Limiter{Interval: RepeatInterval}}
}

// Slog returns the logger records go to, without the fields.
func (g *Logger) Slog() *slog.Logger {
	if g.l != nil {
		return g.l
	}
	return slog.Default()
}

// Error logs msg and err at error level, with args and the fields.
func (g *Logger) Error(msg string, err error, args ...any) {
	g.Slog().Error(msg, g.args(err, args)...)
}

// Repeated is Error for a failure that may repeat many times in a row: of
// the failures of kind (a fixed string, such as the operation retried) it
// logs the first and then at most one per [RepeatInterval], with a field
// "suppressed" counting the ones held back in between.
func (g *Logger) Repeated(kind, msg string, err error, args ...any) {
	ok, held := g.limit.Allow(kind)
	if !ok {
		return
	}
	if held > 0 {
		args = append(args, LogSuppressed, held)
	}
	g.Error(msg, err, args...)
}

func (g *Logger) args(err error, args []any) []any {
	out := make([]any, 0, len(args)+len(g.fields)+2)
	out = append(out, args...)
	out = append(out, g.fields...)
	return append(out, LogErr, err)
}

// Limiter lets through the first event of each kind and then at most one
// per Interval, counting those it holds back. Kinds must come from a fixed
// set: it remembers each. The zero value, with Interval 0, lets everything
// through.
type Limiter struct {
	Interval time.Duration
	now      func() time.Time // time.Now; replaced in tests

	mu    sync.Mutex
	kinds map[string]*limited
}

type limited struct {
	last time.Time
	held int
}

// Allow reports whether to let an event of kind through now and, if so,
// how many of the kind it held back since the last one it let through.
func (l *Limiter) Allow(kind string) (ok bool, held int) {
	now := time.Now
	if l.now != nil {
		now = l.now
	}
	t := now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = make(map[string]*limited)
	}
	s := l.kinds[kind]
	if s == nil {
		l.kinds[kind] = &limited{last: t}
		return true, 0
	}
	if t.Sub(s.last) < l.Interval {
		s.held++
		return false, 0
	}
	held, s.held, s.last = s.held, 0, t
	return true, held
}
