-- +goose Up
-- INT_LOCK: the lock table of Spring Integration 7's JDBC lock registry
-- (DefaultLockRepository), column for column, so that lockreg and Spring
-- applications can share it. Times are UTC wall time.
-- The binary collation makes REGION and LOCK_KEY compare exactly, as they do
-- on PostgreSQL and SQLite (the server default is usually case-insensitive).
CREATE TABLE IF NOT EXISTS INT_LOCK (
	LOCK_KEY CHAR(36) NOT NULL,
	REGION VARCHAR(100) NOT NULL,
	CLIENT_ID CHAR(36),
	CREATED_DATE DATETIME(6) NOT NULL,
	EXPIRED_AFTER DATETIME(6) NOT NULL,
	CONSTRAINT INT_LOCK_PK PRIMARY KEY (LOCK_KEY, REGION)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
