package redislock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/registry"
)

// Repository is one client of the locks kept in Redis: it implements
// registry.Repository with one Lua script per operation, judged by the
// server's clock, and registry.Notifier with Redis pub/sub. Create it with
// New. It is safe for concurrent use and holds no mutex across a call to
// Redis.
//
// The repository remembers, in memory, the keys it holds and those that a
// failed call may have left held (an Acquire whose reply was lost, a
// Release that failed), so that Close releases the latter only.
type Repository struct {
	c    redis.UniversalClient
	cfg  *config
	ears *listener

	mu        sync.Mutex
	leases    map[string]*holding // by caller's key
	closed    bool                // Close was called
	closeDone bool                // a Close released every leftover lease
}

// holding is what the repository knows of one key.
type holding struct {
	acquiring int   // Acquire calls in flight
	held      bool  // the last Acquire took the lease and no Release has ended it
	token     int64 // the token of the lease taken last; 0 if unknown
	// leftover says that a failed call may have left this client holding
	// a lease that nobody holds: Close releases it.
	leftover bool
}

var (
	_ registry.Repository   = (*Repository)(nil)
	_ registry.Notifier     = (*Repository)(nil)
	_ registry.HandOffQueue = (*Repository)(nil)
)

// New returns a repository on c configured by opts. It does no I/O and
// starts no goroutine: the pub/sub connection is opened by the first
// waiter (see Notify). c may be a *redis.Client (a single server, or a
// Sentinel failover client) or a *redis.ClusterClient; the repository
// never closes it.
//
// It returns an error wrapping ErrInvalidOption for a nil c or an invalid
// option.
func New(c redis.UniversalClient, opts ...Option) (*Repository, error) {
	if isNil(c) {
		return nil, fmt.Errorf("%w: New with a nil Redis client", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Repository{
		c:      c,
		cfg:    cfg,
		ears:   newListener(c, cfg.channel, cfg.clientID, cfg.onError, cfg.tel),
		leases: make(map[string]*holding),
	}, nil
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// ClientID returns the client id that owns the leases this repository
// takes.
func (r *Repository) ClientID() string { return r.cfg.clientID }

// millis converts a positive duration to whole milliseconds, rounding up.
func millis(d time.Duration) int64 {
	m := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		m++
	}
	return m
}

// lifetimes returns the arguments for a lease of ttl: its length and the
// token counter's life, in milliseconds.
func lifetimes(ttl time.Duration) (lease, counter string) {
	ms := millis(ttl)
	return strconv.FormatInt(ms, 10), strconv.FormatInt(ms+millis(tokenRetention), 10)
}

// Acquire takes the lease on key for ttl if nobody holds it, if it has
// expired, or if this client holds it (then it is extended to ttl from
// now). It reports false with a nil error when another client holds an
// unexpired lease.
//
// It is one script, one round trip: the lock key is set with PX on the
// server's clock, and the same script issues the lease's fencing token (see
// [registry.Lease]): the key's counter plus one, or the server's clock in
// microseconds if that is greater. ttl must be positive; it is rounded up
// to a millisecond. It fails with an error wrapping registry.ErrClosed after
// Close, and with an error satisfying errors.Is(err, registry.ErrTransient)
// for failures that may pass on retry.
func (r *Repository) Acquire(ctx context.Context, key string, ttl time.Duration) (registry.Lease, bool, error) {
	return r.take(ctx, key, ttl, false)
}

// take is Acquire, or AcquireOrWait with wait: it checks ttl, counts the
// acquisition in flight for Close, and runs the script.
func (r *Repository) take(ctx context.Context, key string, ttl time.Duration, wait bool) (registry.Lease, bool, error) {
	what := opKey("acquire", key)
	if ttl <= 0 {
		return registry.Lease{}, false, fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	h, err := r.begin(what, key)
	if err != nil {
		return registry.Lease{}, false, err
	}
	lease, ok, err := r.acquire(ctx, key, ttl, wait)
	r.end(key, h, lease.Token, ok, err)
	if err != nil {
		return registry.Lease{}, false, wrap(ctx, what, err)
	}
	return lease, ok, nil
}

func (r *Repository) acquire(ctx context.Context, key string, ttl time.Duration, wait bool) (registry.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return registry.Lease{}, false, err
	}
	n := keyNames(r.cfg.prefix, r.cfg.region, key)
	lease, counter := lifetimes(ttl)
	queue := "0"
	if wait {
		queue = "1"
	}
	start := r.cfg.tel.now()
	res, err := acquireScript.Run(ctx, r.c, n.all(), r.cfg.clientID, lease, counter, queue,
		strconv.FormatInt(millis(r.cfg.queueTTL), 10)).Int64Slice()
	r.cfg.tel.command(opAcquire, start, err)
	if err != nil {
		return registry.Lease{}, false, err
	}
	switch {
	case len(res) == 2 && res[0] == 1:
		return registry.Lease{Token: res[1]}, true, nil
	case len(res) == 1 && res[0] == 0:
		return registry.Lease{}, false, nil
	}
	return registry.Lease{}, false, fmt.Errorf("the acquire script returned %v, want {1, token} or {0}", res)
}

// begin counts an acquisition of key in flight, from before its script is
// sent, so that a concurrent Close spares the key.
func (r *Repository) begin(what, key string) (*holding, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%s: %w", what, registry.ErrClosed)
	}
	h := r.leases[key]
	if h == nil {
		h = new(holding)
		r.leases[key] = h
	}
	h.acquiring++
	return h, nil
}

// end records the outcome of an acquisition that begin counted. After an
// error a lease held before stays held, as its holder still relies on it;
// one that was not may have been taken by the script, so it is left over.
func (r *Repository) end(key string, h *holding, token int64, acquired bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.acquiring--
	switch {
	case err != nil:
		h.leftover = h.leftover || !h.held
	case acquired:
		h.held, h.token, h.leftover = true, token, false
	default: // another client holds it
		h.held, h.leftover = false, false
	}
	r.forget(key, h)
}

// forget drops h once it says nothing. r.mu must be held.
func (r *Repository) forget(key string, h *holding) {
	if !h.held && !h.leftover && h.acquiring == 0 {
		delete(r.leases, key)
	}
}

// Renew extends this client's unexpired lease on key to ttl from now. It
// fails with an error wrapping registry.ErrLockLost when the lease has
// expired or is another client's; it never revives an expired lease, since
// Redis has deleted its key.
//
// It is one script, one round trip, on the server's clock. It keeps
// working after Close.
func (r *Repository) Renew(ctx context.Context, key string, ttl time.Duration) error {
	what := opKey("renew", key)
	if ttl <= 0 {
		return fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n := keyNames(r.cfg.prefix, r.cfg.region, key)
	lease, counter := lifetimes(ttl)
	start := r.cfg.tel.now()
	ok, err := renewScript.Run(ctx, r.c, n.all(), r.cfg.clientID, lease, counter).Bool()
	r.cfg.tel.command(opRenew, start, err)
	switch {
	case err != nil:
		return wrap(ctx, what, err)
	case !ok:
		return fmt.Errorf("%s: the lease expired or belongs to another client: %w", what, registry.ErrLockLost)
	}
	return nil
}

// Release gives up this client's lease on key: it hands it to the first
// live waiter in key's queue (see AcquireOrWait), with a new token and the
// lease length that waiter asked for, or else deletes the lock key, keeping
// the token counter; either way it publishes the release on the channel of
// the prefix and region, which wakes the waiter it handed the lease to, or
// every waiter of other repositories (see Notify). It fails with an error wrapping registry.ErrLockLost when
// the lease has expired or belongs to another client. A release whose
// reply was lost and that the client retries succeeds, since the script
// records the token it released.
//
// After it returns nil or ErrLockLost the key no longer counts as held;
// after another error it counts as left over, and Close releases it.
// It is one script, one round trip. It keeps working after Close.
func (r *Repository) Release(ctx context.Context, key string) error {
	what := opKey("release", key)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.mu.Lock()
	var token int64
	if h := r.leases[key]; h != nil {
		token = h.token
	}
	r.mu.Unlock()
	ok, err := r.release(ctx, key, token)
	r.mu.Lock()
	if h := r.leases[key]; h != nil {
		h.held = false
		h.leftover = err != nil
		r.forget(key, h)
	}
	r.mu.Unlock()
	switch {
	case err != nil:
		return wrap(ctx, what, err)
	case !ok:
		return fmt.Errorf("%s: the lease expired or belongs to another client: %w", what, registry.ErrLockLost)
	}
	return nil
}

func (r *Repository) release(ctx context.Context, key string, token int64) (bool, error) {
	n := keyNames(r.cfg.prefix, r.cfg.region, key)
	released := ""
	if token != 0 {
		released = strconv.FormatInt(token, 10)
	}
	_, counter := lifetimes(0)
	start := r.cfg.tel.now()
	ok, err := releaseScript.Run(ctx, r.c, n.all(), r.cfg.clientID, released, counter,
		r.cfg.channel, announcement(key)).Bool()
	r.cfg.tel.command(opRelease, start, err)
	return ok, err
}

// Close makes later Acquire calls fail with an error wrapping
// registry.ErrClosed, stops the pub/sub connection and waits for its
// goroutine, and releases the leases that failed calls may have left this
// client holding (see Release). It never releases a lease that is held or
// being acquired; Renew and Release keep working on those. Leases of an
// earlier process with the same client id are not known to it: they
// expire with their TTL.
//
// It costs one script per left-over lease, none usually. Once a Close has
// succeeded, Close returns nil without I/O; a Close that failed may be
// retried. It does not close the Redis client.
func (r *Repository) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closeDone {
		r.mu.Unlock()
		return nil
	}
	first := !r.closed
	r.closed = true
	type leftover struct {
		key   string
		token int64
	}
	var left []leftover
	for k, h := range r.leases {
		if h.leftover && !h.held && h.acquiring == 0 {
			left = append(left, leftover{k, h.token})
		}
	}
	r.mu.Unlock()
	if first {
		r.ears.stop()
	}
	var errs []error
	for _, l := range left {
		_, err := r.release(ctx, l.key, l.token)
		r.mu.Lock()
		if h := r.leases[l.key]; h != nil && err == nil && !h.held && h.acquiring == 0 {
			h.leftover = false
			r.forget(l.key, h)
		}
		r.mu.Unlock()
		if err != nil {
			errs = append(errs, wrap(ctx, opKey("close: release", l.key), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.mu.Lock()
	r.closeDone = true
	r.mu.Unlock()
	return nil
}

// Notify arranges for c to receive a value, sent without blocking, when
// a client of the same prefix and region releases key and hands it to this
// one or to nobody, and after the
// pub/sub connection was (re-)established, since releases announced
// meanwhile are lost, until stop is called. The first call opens the
// connection, one per repository, subscribed to the region's channel,
// and starts the goroutine that reads it, which Close stops. After Close
// it does nothing.
func (r *Repository) Notify(key string, c chan<- struct{}) (stop func()) {
	return r.ears.subscribe(announcement(key), c)
}

// Check reports whether the repository can serve leases, for readiness
// probes ([registry.Registry.Check] calls it): it pings the server, one
// round trip, and returns the error (transient when the server is
// unreachable) if that fails, and then an error wrapping
// registry.ErrListenerDown, with the listener's last error, while the
// pub/sub listener, once started, reconnects (locks still work then:
// waiters poll). A listener not started yet is no error.
func (r *Repository) Check(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return wrap(ctx, "redislock: check", err)
	}
	if err := r.ears.check(); err != nil {
		return fmt.Errorf("redislock: check: %w", err)
	}
	return nil
}

var _ registry.Checker = (*Repository)(nil)
