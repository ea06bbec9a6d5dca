package groupstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Memory is an in-process [Store], Spring Integration's SimpleMessageStore.
// Its groups live as long as it does and are shared only by the goroutines
// that share it; it suits tests and single instances. Every operation holds
// one mutex for the time of a map lookup and copies the data it hands in or
// out. Make one with [NewMemory].
type Memory struct {
	now func() time.Time

	mu     sync.Mutex
	groups map[string]*memGroup
}

type memGroup struct {
	Group                    // Messages unused; the pending slice holds them
	pending  []Message       // unreleased, in arrival order
	known    map[string]bool // UUIDs ever added: true while pending
	claimEnd time.Time       // end of the current claim, zero for none
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{now: func() time.Time { return time.Now().UTC() }, groups: make(map[string]*memGroup)}
}

func copyMessage(m Message) Message {
	return Message{UUID: m.UUID, Metadata: maps.Clone(m.Metadata), Payload: slices.Clone(m.Payload)}
}

func checkMessage(m Message) error {
	if m.UUID == "" {
		return fmt.Errorf("groupstore: add: message without UUID")
	}
	return nil
}

// Add implements [Store.Add].
func (s *Memory) Add(ctx context.Context, key string, msg Message, timeout time.Duration) (Group, Outcome, error) {
	if err := ctx.Err(); err != nil {
		return Group{}, 0, fmt.Errorf("groupstore: add: %w", err)
	}
	if err := checkMessage(msg); err != nil {
		return Group{}, 0, err
	}
	msg = copyMessage(msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	g := s.groups[key]
	if g == nil {
		g = &memGroup{Group: Group{Key: key, ID: uuid.NewString(), Created: now, Updated: now}, known: map[string]bool{}}
		s.groups[key] = g
	}
	outcome := Added
	switch _, seen := g.known[msg.UUID]; {
	case seen:
		outcome = Duplicate
	case g.Complete:
		outcome = Rejected
	default:
		g.pending = append(g.pending, msg)
		g.known[msg.UUID] = true
		g.Size++
		g.Version++
		g.Updated = now
		if timeout > 0 {
			g.Due, g.claimEnd = now.Add(timeout), time.Time{}
		}
	}
	out := g.Group
	out.Due, out.Updated = time.Time{}, time.Time{}
	return out, outcome, nil
}

// Get implements [Store.Get].
func (s *Memory) Get(ctx context.Context, key string) (Group, error) {
	if err := ctx.Err(); err != nil {
		return Group{}, fmt.Errorf("groupstore: get: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[key]
	if g == nil {
		return Group{}, fmt.Errorf("groupstore: get %q: %w", key, ErrNotFound)
	}
	out := g.Group
	out.Messages = make([]Message, len(g.pending))
	for i, m := range g.pending {
		out.Messages[i] = copyMessage(m)
	}
	return out, nil
}

// Update implements [Store.Update].
func (s *Memory) Update(ctx context.Context, key string, u Update) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("groupstore: update: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[key]
	if g == nil {
		return fmt.Errorf("groupstore: update %q: %w", key, ErrNotFound)
	}
	if u.IfVersion != 0 && u.IfVersion != g.Version {
		return fmt.Errorf("groupstore: update %q: version %d, not %d: %w", key, g.Version, u.IfVersion, ErrConflict)
	}
	now := s.now()
	if u.ReleaseAll || len(u.Release) > 0 {
		drop := make(map[string]bool, len(u.Release))
		for _, id := range u.Release {
			drop[id] = true
		}
		kept := g.pending[:0]
		for _, m := range g.pending {
			if u.ReleaseAll || drop[m.UUID] {
				g.known[m.UUID] = false
				continue
			}
			kept = append(kept, m)
		}
		clear(g.pending[len(kept):])
		g.pending = kept
		g.Size = len(kept)
		g.Releases++
	}
	if u.Complete {
		g.Complete = true
	}
	if u.SetLastReleasedSequence {
		g.LastReleasedSequence = u.LastReleasedSequence
	}
	switch {
	case u.Timeout > 0:
		g.Due, g.claimEnd = now.Add(u.Timeout), time.Time{}
	case u.ClearTimeout:
		g.Due, g.claimEnd = time.Time{}, time.Time{}
	}
	g.Version++
	g.Updated = now
	return nil
}

// Remove implements [Store.Remove].
func (s *Memory) Remove(ctx context.Context, key string, version int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("groupstore: remove: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[key]
	if g == nil {
		return fmt.Errorf("groupstore: remove %q: %w", key, ErrNotFound)
	}
	if version != 0 && version != g.Version {
		return fmt.Errorf("groupstore: remove %q: version %d, not %d: %w", key, g.Version, version, ErrConflict)
	}
	delete(s.groups, key)
	return nil
}

// ClaimDue implements [Store.ClaimDue]. It costs time linear in the number
// of groups.
func (s *Memory) ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]DueGroup, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("groupstore: claim due: %w", err)
	}
	if limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var due []*memGroup
	for _, g := range s.groups {
		if !g.Due.IsZero() && !g.Due.After(now) && !g.claimEnd.After(now) {
			due = append(due, g)
		}
	}
	slices.SortFunc(due, func(a, b *memGroup) int { return a.Due.Compare(b.Due) })
	if len(due) > limit {
		due = due[:limit]
	}
	claims := make([]DueGroup, len(due))
	for i, g := range due {
		g.claimEnd = now.Add(lease)
		claims[i] = DueGroup{Key: g.Key, Version: g.Version}
	}
	return claims, nil
}
