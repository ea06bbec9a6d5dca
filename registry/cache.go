package registry

// idleCache is the LRU cache of the states of idle keys (neither held nor
// awaited). Its list runs through the keyStates themselves, so that moving
// a key between it and the active map, twice per uncontended lock cycle,
// allocates nothing. It is guarded by the registry's mutex.
type idleCache struct {
	byKey    map[string]*keyState
	root     keyState // sentinel: root.next is the most recently used
	capacity int
}

func newIdleCache(capacity int) *idleCache {
	c := &idleCache{byKey: make(map[string]*keyState), capacity: capacity}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// get returns the state of key and marks it most recently used.
func (c *idleCache) get(key string) (*keyState, bool) {
	k, ok := c.byKey[key]
	if ok {
		c.unlink(k)
		c.pushFront(k)
	}
	return k, ok
}

// peek returns the state of key without marking it used.
func (c *idleCache) peek(key string) (*keyState, bool) {
	k, ok := c.byKey[key]
	return k, ok
}

// add puts k, which is not in the cache, in it as the most recently used,
// and evicts the least recently used state beyond the capacity.
func (c *idleCache) add(k *keyState) {
	c.byKey[k.key] = k
	c.pushFront(k)
	if len(c.byKey) > c.capacity {
		c.remove(c.root.prev)
	}
}

// remove takes k, which is in the cache, out of it.
func (c *idleCache) remove(k *keyState) {
	delete(c.byKey, k.key)
	c.unlink(k)
}

// each calls f for every state, from the least recently used; f may
// remove the state it is given.
func (c *idleCache) each(f func(*keyState)) {
	for k := c.root.prev; k != &c.root; {
		prev := k.prev
		f(k)
		k = prev
	}
}

func (c *idleCache) pushFront(k *keyState) {
	k.prev, k.next = &c.root, c.root.next
	c.root.next.prev = k
	c.root.next = k
}

func (c *idleCache) unlink(k *keyState) {
	k.prev.next, k.next.prev = k.next, k.prev
	k.prev, k.next = nil, nil
}
