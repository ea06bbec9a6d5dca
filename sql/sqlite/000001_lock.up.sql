-- +goose Up
-- INT_LOCK: the lock table of Spring Integration 7's JDBC lock registry
-- (DefaultLockRepository), column for column. SQLite has no timestamp type:
-- CREATED_DATE and EXPIRED_AFTER hold UTC wall time as TEXT in the fixed
-- format 'YYYY-MM-DD HH:MM:SS.SSS' (strftime('%Y-%m-%d %H:%M:%f', 'now')),
-- so that comparing the text compares the times.
CREATE TABLE IF NOT EXISTS INT_LOCK (
	LOCK_KEY CHAR(36) NOT NULL,
	REGION VARCHAR(100) NOT NULL,
	CLIENT_ID CHAR(36),
	CREATED_DATE TEXT NOT NULL,
	EXPIRED_AFTER TEXT NOT NULL,
	CONSTRAINT INT_LOCK_PK PRIMARY KEY (LOCK_KEY, REGION)
);
