-- +goose Up
-- INT_LOCK: the lock table of Spring Integration 7's JDBC lock registry
-- (DefaultLockRepository), column for column, so that lockreg and Spring
-- applications can share it. Times are UTC wall time.
CREATE TABLE IF NOT EXISTS INT_LOCK (
	LOCK_KEY CHAR(36) NOT NULL,
	REGION VARCHAR(100) NOT NULL,
	CLIENT_ID CHAR(36),
	CREATED_DATE TIMESTAMP NOT NULL,
	EXPIRED_AFTER TIMESTAMP NOT NULL,
	CONSTRAINT INT_LOCK_PK PRIMARY KEY (LOCK_KEY, REGION)
);
