package testdb

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
)

// Spy is a database that records what a clean-up sends through it: the
// rows each DELETE affected, and the acquisitions of its lease. Prepared
// statements (the lock operations') and transactions (the group store's)
// pass unseen.
type Spy struct {
	*sql.DB
	leaseKey string

	mu         sync.Mutex
	deletes    map[string][]int64 // rows affected per DELETE, by target table
	leaseTries int
}

// NewSpy returns a spy on db of the clean-up whose lease is on the
// LOCK_KEY leaseKey.
func NewSpy(db *sql.DB, leaseKey string) *Spy {
	return &Spy{DB: db, leaseKey: leaseKey, deletes: map[string][]int64{}}
}

// noteLease counts the acquisitions (not the renewals) of the lease: the
// upserts, and on PostgreSQL the UPDATE that takes an existing row, which
// returns the token where a renewal returns nothing.
func (s *Spy) noteLease(query string, args []any) {
	if !strings.HasPrefix(query, "INSERT") && !(strings.HasPrefix(query, "UPDATE") && strings.Contains(query, " RETURNING ")) {
		return
	}
	for _, a := range args {
		if a == s.leaseKey {
			s.mu.Lock()
			s.leaseTries++
			s.mu.Unlock()
			return
		}
	}
}

// ExecContext is the pool's, recorded.
func (s *Spy) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s.noteLease(query, args)
	res, err := s.DB.ExecContext(ctx, query, args...)
	if f := strings.Fields(query); err == nil && len(f) > 2 && f[0] == "DELETE" {
		if n, err := res.RowsAffected(); err == nil {
			s.mu.Lock()
			s.deletes[f[2]] = append(s.deletes[f[2]], n)
			s.mu.Unlock()
		}
	}
	return res, err
}

// QueryRowContext is the pool's, recorded.
func (s *Spy) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	s.noteLease(query, args)
	return s.DB.QueryRowContext(ctx, query, args...)
}

// Deleted returns the rows each DELETE from table affected.
func (s *Spy) Deleted(table string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.deletes[table]...)
}

// Tries returns how often the lease was taken or tried.
func (s *Spy) Tries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaseTries
}

// WantBatched fails t unless the DELETEs from table removed want rows in
// all, none more than 1000.
func (s *Spy) WantBatched(t *testing.T, table string, want int64) {
	t.Helper()
	var sum int64
	counts := s.Deleted(table)
	for _, n := range counts {
		sum += n
		if n > 1000 {
			t.Errorf("a DELETE from %s removed %d rows; want at most 1000 per statement", table, n)
		}
	}
	if sum != want {
		t.Errorf("the DELETEs from %s removed %d rows in all (%v); want %d", table, sum, counts, want)
	}
}

// NextPass waits until a whole clean-up pass has run since it was called:
// passes run one after the other, so once two more have begun, the first
// of them has ended. (A pass in flight may end early, when its lease
// lapses between batches.)
func (s *Spy) NextPass(t testing.TB) {
	t.Helper()
	n := s.Tries()
	WaitFor(t, "a whole clean-up pass", func() bool { return s.Tries() >= n+2 })
}
