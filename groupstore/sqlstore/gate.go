package sqlstore

import (
	"context"
	"sync"
)

// A keyGate knows the groups that a Locked call of the store holds, or
// is about to, in this process. An Add to one of them outside Locked
// waits for the call to end before it takes a connection: in the database
// it would wait for the group row's lock, holding a connection that the
// Locked call may need for something else (a publisher on the same pool),
// which with Config.GroupCommit's default, as many Adds in flight as the
// pool has connections, could leave it none.
type keyGate struct {
	mu      sync.Mutex
	held    map[string]*gateKey
	waiting int // Adds waiting, for tests
}

type gateKey struct {
	n    int           // Locked calls on the key
	done chan struct{} // closed when n drops to 0
}

// enter records a Locked call on key; leave ends it.
func (g *keyGate) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.held[key]
	if k == nil {
		if g.held == nil {
			g.held = make(map[string]*gateKey)
		}
		k = &gateKey{done: make(chan struct{})}
		g.held[key] = k
	}
	k.n++
}

func (g *keyGate) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.held[key]
	if k.n--; k.n == 0 {
		close(k.done)
		delete(g.held, key)
	}
}

// wait returns once no Locked call holds key, or with ctx's error.
func (g *keyGate) wait(ctx context.Context, key string) error {
	for {
		g.mu.Lock()
		k := g.held[key]
		if k != nil {
			g.waiting++
		}
		g.mu.Unlock()
		if k == nil {
			return nil
		}
		var err error
		select {
		case <-k.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
		if err != nil {
			return err
		}
	}
}
