package jdbc

import (
	"fmt"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
)

// Layout names the layout of a lock table, that is, which Spring
// Integration version's INT_LOCK it is and so which statements lockreg
// speaks on it.
type Layout string

// The layouts.
const (
	// LayoutAuto, the default, detects the layout from the table's columns
	// when NewLockRepository and CreateSchema run; a table that does not
	// exist yet is given LayoutSpring7.
	LayoutAuto Layout = ""
	// LayoutSpring7 is Spring Integration 7's INT_LOCK (with EXPIRED_AFTER)
	// plus lockreg's FENCE: lockreg's own layout, with every guarantee of
	// the package doc, and the one CreateSchema creates.
	LayoutSpring7 Layout = "spring7"
	// LayoutSpring6 is the INT_LOCK of Spring Integration 5.4 to 6.x, which
	// has no EXPIRED_AFTER, plus lockreg's FENCE (which CreateSchema adds,
	// with a default Spring's statements leave alone): a lease ends the
	// table TTL (WithSpring6TTL) after its CREATED_DATE. See "Spring
	// Integration 5.4-6.x tables" in the package doc for what holds.
	LayoutSpring6 Layout = "spring6"
)

// DefaultSpring6TTL is the TTL of Spring Integration 5.4-6.x's
// DefaultLockRepository (DEFAULT_TTL, 10 s), the default of WithSpring6TTL.
const DefaultSpring6TTL = 10 * time.Second

// WithLayout sets the lock table's layout instead of detecting it:
// LayoutSpring6 for a Spring Integration 5.4-6.x table that may not exist
// yet when NewLockRepository runs (CreateSchema then creates it in that
// layout), LayoutSpring7 to refuse anything else. NewLockRepository, Check
// and CreateSchema fail with ErrUnsupportedLayout when the table exists in
// the other layout. Any other value fails with ErrInvalidOption.
func WithLayout(l Layout) Option { return func(o *options) { o.layout = l } }

// WithSpring6TTL sets the TTL of the Spring Integration 5.4-6.x registries
// that share a LayoutSpring6 table (DefaultLockRepository's
// setTimeToLive, 10 s by default), which lockreg must use too: their
// statements judge every row expired ttl after its CREATED_DATE, whoever
// wrote it. Leases that lockreg takes or renews on such a table may not be
// longer (Acquire and Renew fail with registry.ErrInvalidTTL), so the
// registry's TTL (registry.WithTTL) must not exceed it; the Spring side's
// must equal it. It must be positive, and has no effect on a LayoutSpring7
// table.
func WithSpring6TTL(ttl time.Duration) Option {
	return func(o *options) { o.spring6TTL, o.spring6TTLSet = ttl, true }
}

// Layout returns the layout of the repository's lock table, as detected or
// set with WithLayout.
func (r *LockRepository) Layout() Layout { return r.cfg.layout }

// settleLayout checks the layout options.
func (c *config) settleLayout() error {
	switch c.layout {
	case LayoutAuto, LayoutSpring6, LayoutSpring7:
	default:
		return invalid("WithLayout", string(c.layout), fmt.Sprintf("the layout must be %q, %q or %q",
			LayoutAuto, LayoutSpring7, LayoutSpring6))
	}
	if !c.spring6TTLSet {
		c.spring6TTL = DefaultSpring6TTL
	}
	if c.spring6TTL <= 0 {
		return invalid("WithSpring6TTL", c.spring6TTL.String(), "the TTL must be positive")
	}
	return nil
}

// useSpring6 settles cfg on a Spring 5.4-6.x table: it has no waiter queue,
// so no listener, and no clean-up by default (its lease outlasts the table
// TTL); an explicit WithCleanup is refused, DeleteExpired still works.
func (c *config) useSpring6() error {
	c.layout = LayoutSpring6
	if c.listener != nil {
		return fmt.Errorf("%w: WithListener: a Spring Integration 5.4-6.x lock table (%s) has no waiter queue; "+
			"waiters poll", ErrInvalidOption, c.table)
	}
	if c.cleanup.set && !c.cleanup.off {
		return fmt.Errorf("%w: WithCleanup: not available on a Spring Integration 5.4-6.x lock table (%s): "+
			"call DeleteExpired instead", ErrInvalidOption, c.table)
	}
	c.cleanup.off = true
	return nil
}

// spring6 adjusts p for the statements of a Spring 5.4-6.x table (see
// package dialect's Spring6Lock): :ttl is the table TTL, :wait the table
// TTL plus a millisecond, which a release subtracts from now, so the row is
// expired at once (SQLite keeps milliseconds).
func (c *config) spring6(p params) params {
	if c.layout == LayoutSpring6 {
		p.ttl = dialect.Micros(c.spring6TTL)
		p.wait = dialect.Micros(c.spring6TTL + time.Millisecond)
	}
	return p
}

// checkSpring6TTL refuses a lease longer than the table TTL of a Spring
// 5.4-6.x table.
func (c *config) checkSpring6TTL(ttl time.Duration) error {
	if c.layout == LayoutSpring6 && ttl > c.spring6TTL {
		return fmt.Errorf("ttl %v exceeds the TTL %v of the Spring Integration 5.4-6.x lock table %s (WithSpring6TTL)",
			ttl, c.spring6TTL, c.table)
	}
	return nil
}

// compileSpring6 compiles the statements of a Spring 5.4-6.x table, custom
// queries included.
func compileSpring6(cfg *config) (*lockStatements, error) {
	d, prefix := cfg.d, cfg.prefix
	all := append(append([]string(nil), dialect.CustomParams...), dialect.Retention, dialect.Batch)
	c := func(template string) dialect.Query { return d.MustCompile(template, prefix, all...) }
	l := d.Spring6Lock()
	s := &lockStatements{
		acquire: c(l.Acquire), renew: c(l.Renew), release: c(dialect.Spring6Release),
		releaseAfter: c(l.ReleaseAfter),
		sweep:        c(l.Sweep),
		expireMine:   c(dialect.Spring6ExpireMine), selectMine: c(dialect.Spring6SelectMine),
		expireOne: c(dialect.Spring6Release), check: c(dialect.Spring6CheckLock),
	}
	if l.SweepKeys != "" {
		s.sweepKeys = c(l.SweepKeys)
	}
	return s, compileCustom(cfg, s)
}
