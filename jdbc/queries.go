package jdbc

import (
	"fmt"

	"github.com/lockreg/lockreg/internal/dialect"
)

// params are the values the lock statements' named parameters take (see
// the parameter names in package dialect).
type params struct {
	lockKey, region, clientID, channel string
	lockName, holder                   string // acquisitions' only
	ttl, wait                          int64
	retention, batch                   int64  // the clean-up's
	rows                               string // a group commit's keys, as JSON
}

// args returns the arguments of q, a compiled lock statement.
func (p params) args(q dialect.Query) []any {
	args := make([]any, len(q.Names))
	for i, n := range q.Names {
		args[i] = p.value(n)
	}
	return args
}

// value returns the value of the parameter called name.
func (p params) value(name string) any {
	switch name {
	case dialect.LockKey:
		return p.lockKey
	case dialect.Region:
		return p.region
	case dialect.ClientID:
		return p.clientID
	case dialect.TTL:
		return p.ttl
	case dialect.Wait:
		return p.wait
	case dialect.Channel:
		return p.channel
	case dialect.LockName:
		return p.lockName
	case dialect.Holder:
		return p.holder
	case dialect.Retention:
		return p.retention
	case dialect.Batch:
		return p.batch
	case dialect.Rows:
		return p.rows
	}
	return nil
}

// lockStatements are the compiled statements of one lock table.
type lockStatements struct {
	acquire, renew, release dialect.Query // the defaults, or the custom queries
	releaseAfter            dialect.Query
	sweep, sweepKeys        dialect.Query // sweepKeys.SQL is "" unless the dialect selects keys first
	expireMine, selectMine  dialect.Query
	expireOne, check        dialect.Query // expireOne is the default release, whatever WithReleaseQuery says
	expire                  dialect.Query // PostgreSQL's release when nobody waits; SQL "" elsewhere and with a custom release
	take                    dialect.Query // PostgreSQL's acquire of an existing row; SQL "" elsewhere and with a custom acquire
	takeBatch, expireBatch  dialect.Query // take and expire for several keys; SQL "" where take or expire is
	check6                  dialect.Query // the check of a Spring 5.4-6.x table (probe only)
	queue                   *queueStatements
}

// queueStatements are the compiled statements of PostgreSQL's waiter queue.
type queueStatements struct {
	acquireOrWait, handed, leave, sweep dialect.Query
}

// compileLock compiles the statements of cfg's lock table, custom queries
// included; it fails only on a custom query.
func compileLock(cfg *config) (*lockStatements, error) {
	if cfg.layout == LayoutSpring6 {
		return compileSpring6(cfg)
	}
	d, prefix := cfg.d, cfg.prefix
	all := append(append([]string(nil), dialect.CustomParams...), dialect.Retention, dialect.Batch, dialect.Rows)
	c := func(template string) dialect.Query { return d.MustCompile(template, prefix, all...) }
	s := &lockStatements{
		acquire: c(d.Lock.Acquire), renew: c(d.Lock.Renew), release: c(dialect.Release),
		releaseAfter: c(d.Lock.ReleaseAfter),
		sweep:        c(d.Lock.Sweep),
		expireMine:   c(dialect.ExpireMine), selectMine: c(dialect.SelectMine),
		expireOne: c(dialect.Release), check: c(d.CheckLock()),
	}
	if d.Lock.Take != "" && !cfg.querySet[qAcquire] {
		s.take, s.takeBatch = c(d.Lock.Take), c(d.Lock.TakeBatch)
	}
	if d.Lock.SweepKeys != "" {
		s.sweepKeys = c(d.Lock.SweepKeys)
	}
	if q := d.Lock.Queue; q != nil {
		s.release = c(q.Release) // announces the release
		if !cfg.querySet[qRelease] {
			s.expire, s.expireBatch = c(q.Expire), c(d.Lock.ExpireBatch)
		}
		if !cfg.querySet[qAcquire] {
			s.queue = &queueStatements{acquireOrWait: c(q.AcquireOrWait), handed: c(q.Handed), leave: c(q.Leave), sweep: c(q.Sweep)}
		}
	}
	return s, compileCustom(cfg, s)
}

// compileCustom compiles cfg's custom queries into s.
func compileCustom(cfg *config, s *lockStatements) error {
	for i, dst := range []*dialect.Query{&s.acquire, &s.renew, &s.release} {
		if !cfg.querySet[i] {
			continue
		}
		q, err := cfg.d.Compile(cfg.queries[i], cfg.prefix, dialect.CustomParams...)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOption, queryOptionNames[i], err)
		}
		*dst = q
	}
	return nil
}
