package jdbc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockreg/lockreg/registry"
)

// Renew extends this client's unexpired lease on key to ttl from now. It
// fails with an error wrapping registry.ErrLockLost when the lease has
// expired or is not this client's; it never revives an expired lease, even
// one still in the table under this client's id.
//
// It is one UPDATE statement, one round trip once prepared, on the
// database's clock. It keeps working after Close.
func (r *LockRepository) Renew(ctx context.Context, key string, ttl time.Duration) error {
	what := opKey("renew", key)
	if ttl <= 0 {
		return fmt.Errorf("%s: ttl %v: %w", what, ttl, registry.ErrInvalidTTL)
	}
	if err := r.cfg.checkSpring6TTL(ttl); err != nil {
		return fmt.Errorf("%s: %w: %w", what, registry.ErrInvalidTTL, err)
	}
	lk, err := r.lockKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	res, err := r.renew.exec(ctx, r.db, r.params(lk, ttl).args(r.renew.q))
	return r.affected(ctx, what, res, err)
}

// lost returns an error wrapping registry.ErrLockLost if res affected no row.
func lost(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return registry.ErrLockLost
	}
	return nil
}

// Release gives up this client's lease on key by expiring its row in place,
// expired or not (nobody else has held an expired row that is still this
// client's). The row stays, with its fencing token, for the next holder,
// until the clean-up (WithCleanup) or DeleteExpired removes it. Release
// fails with an error wrapping registry.ErrLockLost when the row is gone or
// belongs to another client.
// After it returns nil or ErrLockLost the key no longer counts as held, so
// Close may expire a row left behind.
//
// It is one UPDATE statement, one round trip once prepared. It keeps working
// after Close.
func (r *LockRepository) Release(ctx context.Context, key string) error {
	what := opKey("release", key)
	lk, err := r.lockKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	hk := heldKey(lk)
	if r.releaseReturns {
		var n int64
		if r.expire != nil && !r.wasHanded(hk) {
			// One UPDATE when nobody waits; the hand-off statement only
			// when someone does (or the row is not ours: it says which).
			var expired bool
			if expired, err = r.expireRow(ctx, lk, hk); expired {
				n = 1
			}
		}
		if err == nil && n == 0 {
			if _, err = r.release.scan(ctx, r.db, r.params(lk, 0).args(r.release.q), &n); err == nil && n == 0 {
				err = registry.ErrLockLost
			}
		}
	} else {
		var res sql.Result
		if res, err = r.release.exec(ctx, r.db, r.params(lk, 0).args(r.release.q)); err == nil {
			err = lost(res)
		}
	}
	if err != nil && !errors.Is(err, registry.ErrLockLost) {
		return r.wrap(ctx, what, err) // outcome unknown: the key stays held
	}
	r.mu.Lock()
	if h := r.held[hk]; h != nil {
		h.held = false
		if h.acquiring == 0 {
			delete(r.held, hk)
		}
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// wasHanded reports whether this client's current lease on the row hk was
// handed over by a release.
func (r *LockRepository) wasHanded(hk string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.held[hk]
	return h != nil && h.handed
}

// isHeld reports whether the row of lockKey is held or being acquired.
func (r *LockRepository) isHeld(lockKey string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[heldKey(lockKey)] != nil
}

// affected turns the outcome of a guarded UPDATE into an error: one
// wrapping registry.ErrLockLost when it touched no row.
func (r *LockRepository) affected(ctx context.Context, what string, res sql.Result, err error) error {
	if err == nil {
		err = lost(res)
	}
	if errors.Is(err, registry.ErrLockLost) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err != nil {
		return r.wrap(ctx, what, err)
	}
	return nil
}
