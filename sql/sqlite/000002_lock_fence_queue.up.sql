-- +goose Up
-- FENCE: lockreg's fencing token, the one column lockreg adds to Spring
-- Integration's INT_LOCK. Its default keeps Spring's statements working, so
-- this also upgrades a table that Spring created. SQLite has no ADD COLUMN
-- IF NOT EXISTS: this statement is the one in lockreg's scripts that is not
-- idempotent; jdbc.CreateSchema skips it when the column exists.
ALTER TABLE INT_LOCK ADD FENCE INTEGER NOT NULL DEFAULT 0;
