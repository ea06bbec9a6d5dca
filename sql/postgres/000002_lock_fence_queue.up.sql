-- +goose Up
-- FENCE: lockreg's fencing token, the one column lockreg adds to Spring
-- Integration's INT_LOCK. Its default keeps Spring's statements working, so
-- this also upgrades a table that Spring created.
ALTER TABLE INT_LOCK ADD COLUMN IF NOT EXISTS FENCE BIGINT NOT NULL DEFAULT 0;

-- INT_LOCK_WAIT: the queue of waiters per lock, so that PostgreSQL serves
-- them in arrival order. A row is one client's place: it lapses at
-- WAITING_UNTIL unless the client asks again. A release hands the lease to
-- the first live waiter for LEASE_MICROS, the lease length it asked for.
-- Times are UTC wall time.
CREATE TABLE IF NOT EXISTS INT_LOCK_WAIT (
	LOCK_KEY CHAR(36) NOT NULL,
	REGION VARCHAR(100) NOT NULL,
	CLIENT_ID CHAR(36) NOT NULL,
	WAITING_SINCE TIMESTAMP NOT NULL,
	WAITING_UNTIL TIMESTAMP NOT NULL,
	LEASE_MICROS BIGINT NOT NULL DEFAULT 0,
	CONSTRAINT INT_LOCK_WAIT_PK PRIMARY KEY (LOCK_KEY, REGION, CLIENT_ID)
);
-- For queues created before LEASE_MICROS existed.
ALTER TABLE INT_LOCK_WAIT ADD COLUMN IF NOT EXISTS LEASE_MICROS BIGINT NOT NULL DEFAULT 0;
