-- +goose Down
-- Removes what 000002 added, leaving INT_LOCK as Spring Integration 7
-- creates it. Like the ADD in 000002, this is not idempotent: SQLite has no
-- DROP COLUMN IF EXISTS. It needs SQLite 3.35 or later.
ALTER TABLE INT_LOCK DROP COLUMN FENCE;
