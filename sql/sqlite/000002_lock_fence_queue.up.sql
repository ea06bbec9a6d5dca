-- +goose Up
-- FENCE: lockreg's fencing token, the one column lockreg adds to Spring
-- Integration's INT_LOCK. Its default keeps Spring's statements working, so
-- this also upgrades a table that Spring created. jdbc.CreateSchema skips it
-- when the column exists.
ALTER TABLE INT_LOCK ADD FENCE INTEGER NOT NULL DEFAULT 0;
