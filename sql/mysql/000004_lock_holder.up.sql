-- +goose Up
-- Readable rows: LOCK_NAME is the key as the application wrote it (LOCK_KEY
-- holds its MD5 UUID), written when lockreg inserts the row; HOLDER
-- describes the lockreg client that last took the lease (host, process,
-- application name), written on each acquisition. Both are nullable, so
-- Spring Integration's statements, which name neither, keep working on the
-- table; Spring's rows leave them NULL. As in 000002, each ALTER is
-- prepared only when the column is missing.
SET @lockreg_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE INT_LOCK ADD LOCK_NAME VARCHAR(255) NULL', 'DO 0')
	FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'INT_LOCK' AND COLUMN_NAME = 'LOCK_NAME');
PREPARE lockreg_ddl FROM @lockreg_ddl;
EXECUTE lockreg_ddl;
DEALLOCATE PREPARE lockreg_ddl;
SET @lockreg_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE INT_LOCK ADD HOLDER VARCHAR(255) NULL', 'DO 0')
	FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'INT_LOCK' AND COLUMN_NAME = 'HOLDER');
PREPARE lockreg_ddl FROM @lockreg_ddl;
EXECUTE lockreg_ddl;
DEALLOCATE PREPARE lockreg_ddl;
