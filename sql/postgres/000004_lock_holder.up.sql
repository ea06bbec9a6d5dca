-- +goose Up
-- Readable rows: LOCK_NAME is the key as the application wrote it (LOCK_KEY
-- holds its MD5 UUID), written when lockreg inserts the row; HOLDER
-- describes the lockreg client that last took the lease (host, process,
-- application name), written on each acquisition. Both are nullable, so
-- Spring Integration's statements, which name neither, keep working on the
-- table; Spring's rows leave them NULL. INT_LOCK_WAIT.HOLDER describes a
-- waiter, and passes to INT_LOCK.HOLDER when a release hands it the lease.
ALTER TABLE INT_LOCK ADD COLUMN IF NOT EXISTS LOCK_NAME VARCHAR(255);
ALTER TABLE INT_LOCK ADD COLUMN IF NOT EXISTS HOLDER VARCHAR(255);
ALTER TABLE INT_LOCK_WAIT ADD COLUMN IF NOT EXISTS HOLDER VARCHAR(255);
