package main

// The lock scenarios' floors: floor-durable (a lock cycle as two durable
// single-row UPDATE transactions) and floor-handoff (the least a durable
// cross-process hand-off does). See floors.go.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
)

// floorInst is one instance of floor-durable or floor-handoff: a pool
// whose lockers each take a connection of their own.
type floorInst struct {
	e       *env
	server  string
	handoff bool
	db      *sql.DB
	c       *counter

	mu      sync.Mutex
	conns   []*sql.Conn
	listens []*pgx.Conn
	rings   []*ring
}

// openFloor returns the open function of floor-durable on server, or with
// handoff of floor-handoff (PostgreSQL only).
func openFloor(server string, handoff bool) func(context.Context, *env, int) (instance, error) {
	return func(ctx context.Context, e *env, pool int) (instance, error) {
		db, c, err := openFloorDB(ctx, e, server, pool)
		if err != nil {
			return nil, err
		}
		return &floorInst{e: e, server: server, handoff: handoff, db: db, c: c}, nil
	}
}

func (i *floorInst) locker(ctx context.Context, key string) (locker, error) {
	conn, err := i.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	i.mu.Lock()
	i.conns = append(i.conns, conn)
	i.mu.Unlock()
	// The key's row, reset: the ring's first member holds a hand-off key.
	upsert := `INSERT INTO ` + floorLocks + ` (lock_key, holder) VALUES (%s, '0') ON CONFLICT (lock_key) DO UPDATE SET holder = '0', expires = NULL`
	if i.server == "mariadb" {
		upsert = `INSERT INTO ` + floorLocks + ` (lock_key, holder) VALUES (%s, '0') ON DUPLICATE KEY UPDATE holder = '0', expires = NULL`
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(upsert, ph(i.server, 1)...), key); err != nil {
		return nil, err
	}
	p := ph(i.server, 2)
	if !i.handoff {
		return &durableLocker{conn: conn, key: key,
			lockSQL:   fmt.Sprintf(`UPDATE `+floorLocks+` SET holder = %s, expires = `+floorLater(i.server)+` WHERE lock_key = %s`, p...),
			unlockSQL: fmt.Sprintf(`UPDATE `+floorLocks+` SET holder = NULL, expires = NULL WHERE lock_key = %s`, p[0])}, nil
	}
	listen, err := pgx.Connect(ctx, i.e.pgDSN)
	if err != nil {
		return nil, err
	}
	if _, err := listen.Exec(ctx, `LISTEN `+floorChannel); err != nil {
		listen.Close(ctx)
		return nil, err
	}
	r, id := rings.join(key)
	i.mu.Lock()
	i.listens, i.rings = append(i.listens, listen), append(i.rings, r)
	i.mu.Unlock()
	return &handoffLocker{conn: conn, listen: listen, key: key, ring: r, id: id}, nil
}

func (i *floorInst) stmts() int64 { return count(i.c) }

func (i *floorInst) close() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, c := range i.conns {
		c.Close()
	}
	for _, l := range i.listens {
		l.Close(context.Background())
	}
	for _, r := range i.rings {
		rings.leave(r)
	}
	return i.db.Close()
}

// durableLocker's cycle is two single-row UPDATEs, each its own
// transaction, on its own connection: floor-durable.
type durableLocker struct {
	conn               *sql.Conn
	key                string
	lockSQL, unlockSQL string
}

func (l *durableLocker) lock(ctx context.Context) error {
	_, err := l.conn.ExecContext(ctx, l.lockSQL, "floor", l.key)
	return err
}

func (l *durableLocker) unlock(ctx context.Context) error {
	_, err := l.conn.ExecContext(ctx, l.unlockSQL, l.key)
	return err
}

// handoffLocker is floor-handoff: the key passes round a ring of the
// instances. The holder's release is one transaction that writes the next
// member as holder and notifies it; the next member's listener wakes it,
// and it reads the row. No queue, no expiry, no wait for any other member.
type handoffLocker struct {
	conn   *sql.Conn
	listen *pgx.Conn
	key    string
	ring   *ring
	id     int
}

func (l *handoffLocker) lock(ctx context.Context) error {
	me := strconv.Itoa(l.id)
	for {
		var holder string
		if err := l.conn.QueryRowContext(ctx, `SELECT holder FROM `+floorLocks+` WHERE lock_key = $1`, l.key).Scan(&holder); err != nil {
			return err
		}
		if holder == me {
			return nil
		}
		for { // a notification naming this member; stale ones just cost a read
			n, err := l.listen.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			if n.Payload == me {
				break
			}
		}
	}
}

func (l *handoffLocker) unlock(ctx context.Context) error {
	next := strconv.Itoa((l.id + 1) % l.ring.size())
	var sent int
	err := l.conn.QueryRowContext(ctx, `WITH u AS (UPDATE `+floorLocks+` SET holder = $2 WHERE lock_key = $1 RETURNING holder) `+
		`SELECT COUNT(pg_notify('`+floorChannel+`', holder)) FROM u`, l.key, next).Scan(&sent)
	if err == nil && sent != 1 {
		err = errors.New("floor-handoff: the key's row is missing")
	}
	return err
}

// A ring is the members of floor-handoff on one key, numbered in the order
// they joined; all join before any locks (the contended scenario makes
// every locker first).
type ring struct {
	key string
	n   int
}

// ringSet holds the rings by key.
type ringSet struct {
	mu    sync.Mutex
	byKey map[string]*ring
}

var rings = ringSet{byKey: map[string]*ring{}}

// join adds a member to key's ring and returns the ring and the member's
// number.
func (s *ringSet) join(key string) (*ring, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.byKey[key]
	if r == nil {
		r = &ring{key: key}
		s.byKey[key] = r
	}
	r.n++
	return r, r.n - 1
}

// leave removes a member; the ring is forgotten with its last member.
func (s *ringSet) leave(r *ring) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.n--; r.n == 0 && s.byKey[r.key] == r {
		delete(s.byKey, r.key)
	}
}

// size returns how many members the ring has.
func (r *ring) size() int {
	rings.mu.Lock()
	defer rings.mu.Unlock()
	return r.n
}
