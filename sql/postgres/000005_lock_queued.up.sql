-- +goose Up
-- QUEUED_UNTIL: PostgreSQL's has-waiters flag. A waiter's queue statement
-- raises it to its place's deadline in INT_LOCK_WAIT whenever it does not
-- take the lease, writing the lock row and so serializing with a release on
-- the row lock; acquisitions probe the queue, and releases hand the lease
-- over, only while it lies in the future, so a key nobody waits for costs
-- no look-up of the queue. NULL (no waiter yet) keeps Spring Integration's
-- statements, which name it not, working on the table.
ALTER TABLE INT_LOCK ADD COLUMN IF NOT EXISTS QUEUED_UNTIL TIMESTAMP NULL;
