-- +goose Down
-- Removes what 000002 added, leaving INT_LOCK as Spring Integration 7
-- creates it.
DROP TABLE IF EXISTS INT_LOCK_WAIT;
ALTER TABLE INT_LOCK DROP COLUMN IF EXISTS FENCE;
