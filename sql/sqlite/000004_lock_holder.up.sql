-- +goose Up
-- Readable rows: LOCK_NAME is the key as the application wrote it (LOCK_KEY
-- holds its MD5 UUID), written when lockreg inserts the row; HOLDER
-- describes the lockreg client that last took the lease (host, process,
-- application name), written on each acquisition. Both are nullable, so
-- Spring Integration's statements, which name neither, keep working on the
-- table; Spring's rows leave them NULL. Like ADD FENCE in 000002 these are
-- not idempotent; jdbc.CreateSchema skips a column that exists.
ALTER TABLE INT_LOCK ADD LOCK_NAME VARCHAR(255);
ALTER TABLE INT_LOCK ADD HOLDER VARCHAR(255);
