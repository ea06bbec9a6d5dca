package testdb

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
)

// Lease is a row of a lock table, read in one statement with the
// database's clock.
type Lease struct {
	ClientID  string        // CLIENT_ID without padding; "" when NULL (kept after a release)
	Created   time.Time     // CREATED_DATE, UTC
	Expires   int64         // EXPIRED_AFTER in microseconds since 1970, as Clock reads the clock
	Remaining time.Duration // EXPIRED_AFTER minus the database's clock; negative once expired
	Fence     int64         // FENCE, the last token handed out
	LockName  string        // LOCK_NAME, the key as written; "" when NULL
	Holder    string        // HOLDER, the last lockreg holder's description; "" when NULL
}

// Lease reads the row of lockKey, a LOCK_KEY as stored (jdbc.UUIDKey of a
// lock's key under the default key mapping), in region of table, and
// reports false when there is none.
func (b Backend) Lease(t testing.TB, table, region, lockKey string) (Lease, bool) {
	t.Helper()
	var (
		l                       Lease
		client, name, holder    sql.NullString
		created, expires, clock int64
	)
	err := b.DB.QueryRowContext(context.Background(),
		b.Q(`SELECT CLIENT_ID, `+b.Micros(`CREATED_DATE`)+`, `+b.Micros(`EXPIRED_AFTER`)+`, `+b.clock()+`, FENCE, LOCK_NAME, HOLDER FROM `+table+
			` WHERE REGION = ? AND LOCK_KEY = ?`), region, lockKey).Scan(&client, &created, &expires, &clock, &l.Fence, &name, &holder)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, false
	}
	if err != nil {
		t.Fatalf("reading the lease of %.40q: %v", lockKey, err)
	}
	l.ClientID = strings.TrimRight(client.String, " ")
	l.LockName, l.Holder = name.String, holder.String
	l.Created = time.UnixMicro(created).UTC()
	l.Expires = expires
	l.Remaining = time.Duration(expires-clock) * time.Microsecond
	return l, true
}

// MustLease reads the row of the lock key in region of the default table
// INT_LOCK under the default key mapping, failing t when there is none.
func (b Backend) MustLease(t testing.TB, region, key string) Lease {
	t.Helper()
	l, ok := b.Lease(t, "INT_LOCK", region, jdbc.UUIDKey(key))
	if !ok {
		t.Fatalf("no lease of %.40q in region %s", key, region)
	}
	return l
}

// NewRepository returns a lock repository on b, one client of region,
// whose background errors go nowhere and which, on PostgreSQL through pgx,
// listens for releases (pgxlisten); opts come after these and win. The
// caller, or the registry that takes it, closes it. It takes no
// testing.TB, so that the tests' child processes can use it too.
func (b Backend) NewRepository(ctx context.Context, region string, opts ...jdbc.Option) (*jdbc.LockRepository, error) {
	base := []jdbc.Option{jdbc.WithRegion(region), jdbc.WithErrorHandler(func(error) {})}
	if b.Driver == "pgx" {
		base = append(base, jdbc.WithListener(pgxlisten.New(b.DB)))
	}
	return jdbc.NewLockRepository(ctx, b.DB, append(base, opts...)...)
}
