// Package redislock keeps lockreg's leases in Redis: it implements
// [registry.Repository] and [registry.Notifier] with
// github.com/redis/go-redis/v9, after Spring Integration's RedisLockRegistry.
package redislock
