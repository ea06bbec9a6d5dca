-- +goose Down
-- Drops the lock table, also one that Spring Integration created before
-- 000001: to leave a shared table to Spring, migrate down to version 1.
DROP TABLE IF EXISTS INT_LOCK;
