-- +goose Down
-- Drops the message group tables (and their index).
DROP TABLE IF EXISTS INT_GROUP_MESSAGE;
DROP TABLE IF EXISTS INT_GROUP;
