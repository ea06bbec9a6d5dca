package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// The Redis contestants: lockreg's registry over package redislock, and
// the plain SET NX PX lock that redsync takes on a single node. Both run on
// LOCKREG_REDIS_ADDR (default 127.0.0.1:6379), logical database
// LOCKREG_REDIS_DB (default 0), under key prefixes of their own, which
// reset deletes (never the whole database).
const (
	redisLockregPrefix = "bench:lockreg:"
	redisSetnxPrefix   = "bench:setnx:"
)

func init() { contestants = append(contestants, redisContestants...) }

var redisContestants = []contestant{
	// registry.New(redislock.New(client)): pub/sub wake-ups and the queue.
	{name: "lockreg-redis", server: "redis", isLock: true, counted: true, open: openRedisLockreg},
	// SET key value NX PX ttl; release: a script comparing the value, then DEL.
	{name: "redis-setnx", server: "redis", isLock: true, counted: true, open: openRedisSetnx},
}

// redisEnv is the Redis server of a run.
type redisEnv struct {
	addr string
	db   int
	err  error // why Redis is unusable
	c    *redis.Client
}

func (e *env) setupRedis(ctx context.Context) {
	r := &redisEnv{addr: envOr("LOCKREG_REDIS_ADDR", "127.0.0.1:6379")}
	e.redis = r
	db, err := strconv.Atoi(envOr("LOCKREG_REDIS_DB", "0"))
	if err != nil {
		r.err = fmt.Errorf("LOCKREG_REDIS_DB: %w", err)
		return
	}
	r.db = db
	r.c = redis.NewClient(&redis.Options{Addr: r.addr, DB: db})
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := r.c.Ping(pctx).Err(); err != nil {
		r.c.Close()
		r.c = nil
		r.err = fmt.Errorf("Redis unreachable at %s (set LOCKREG_REDIS_ADDR): %w", r.addr, err)
	}
}

func (r *redisEnv) close() {
	if r != nil && r.c != nil {
		r.c.Close()
	}
}

// reset deletes the benchmark's keys.
func (r *redisEnv) reset(ctx context.Context) error {
	for _, p := range []string{redisLockregPrefix, redisSetnxPrefix} {
		iter := r.c.Scan(ctx, 0, p+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := r.c.Unlink(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
	}
	return nil
}

// fact describes the server and its persistence settings.
func (r *redisEnv) fact(ctx context.Context) [2]string {
	if r.err != nil {
		return [2]string{"Redis", "skipped: " + r.err.Error()}
	}
	version := "?"
	if info, err := r.c.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	var s []string
	for _, name := range []string{"save", "appendonly", "appendfsync", "maxmemory-policy"} {
		if kv, err := r.c.ConfigGet(ctx, name).Result(); err == nil {
			v := kv[name]
			if v == "" {
				v = "''"
			}
			s = append(s, name+"="+v)
		}
	}
	return [2]string{"Redis", fmt.Sprintf("%s at %s, database %d; %s", version, r.addr, r.db, strings.Join(s, ", "))}
}

// cmdCounter is a go-redis hook that counts the commands sent: round
// trips, as a script is one command.
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// openRedisClient opens a client with pool connections, counted.
func openRedisClient(e *env, pool int) (*redis.Client, *cmdCounter, error) {
	if e.redis == nil || e.redis.err != nil {
		return nil, nil, errors.New("redis unavailable")
	}
	c := redis.NewClient(&redis.Options{Addr: e.redis.addr, DB: e.redis.db, PoolSize: pool, MinIdleConns: pool})
	n := new(cmdCounter)
	c.AddHook(n)
	return c, n, nil
}

// ---- lockreg over redislock ----

type redisLockregInst struct {
	c   *redis.Client
	n   *cmdCounter
	reg *registry.Registry
}

func openRedisLockreg(ctx context.Context, e *env, pool int) (instance, error) {
	c, n, err := openRedisClient(e, pool)
	if err != nil {
		return nil, err
	}
	repo, err := redislock.New(c, redislock.WithPrefix(redisLockregPrefix), redislock.WithRegion("bench"),
		redislock.WithErrorHandler(func(err error) { e.logf("lockreg-redis: %v", err) }))
	if err != nil {
		c.Close()
		return nil, err
	}
	reg, err := registry.New(repo, registry.WithErrorHandler(func(key string, err error) {
		e.logf("lockreg-redis: %s: %v", key, err)
	}))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &redisLockregInst{c: c, n: n, reg: reg}, nil
}

func (i *redisLockregInst) locker(_ context.Context, key string) (locker, error) {
	return lockregLocker{i.reg.Obtain(key)}, nil
}
func (i *redisLockregInst) stmts() int64 { return i.n.n.Load() }
func (i *redisLockregInst) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := i.reg.Close(ctx)
	return errors.Join(err, i.c.Close())
}

// ---- SET NX PX, redsync's single-node form ----

// setnxRelease is redsync's delete script.
var setnxRelease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

type setnxInst struct {
	c *redis.Client
	n *cmdCounter
}

func openRedisSetnx(ctx context.Context, e *env, pool int) (instance, error) {
	c, n, err := openRedisClient(e, pool)
	if err != nil {
		return nil, err
	}
	return &setnxInst{c: c, n: n}, nil
}

func (i *setnxInst) locker(_ context.Context, key string) (locker, error) {
	return &setnxLocker{i: i, key: redisSetnxPrefix + key}, nil
}
func (i *setnxInst) stmts() int64 { return i.n.n.Load() }
func (i *setnxInst) close() error { return i.c.Close() }

type setnxLocker struct {
	i     *setnxInst
	key   string
	value string
}

// lock is redsync's Mutex.LockContext on one node: SET NX PX with a random
// value, the same TTL as the others (10 s), retried after a random delay of
// 50 to 250 ms (redsync's default), without its limit of 32 tries.
func (l *setnxLocker) lock(ctx context.Context) error {
	var b [16]byte
	rand.Read(b[:])
	value := hex.EncodeToString(b[:])
	for {
		ok, err := l.i.c.SetNX(ctx, l.key, value, peerTTL).Result()
		if err != nil {
			return err
		}
		if ok {
			l.value = value
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond+mrand.N(200*time.Millisecond)); err != nil {
			return err
		}
	}
}

func (l *setnxLocker) unlock(ctx context.Context) error {
	n, err := setnxRelease.Run(ctx, l.i.c, []string{l.key}, l.value).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("redis-setnx: the key was not ours")
	}
	return nil
}
