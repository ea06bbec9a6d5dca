-- +goose Up
-- FENCE: lockreg's fencing token, the one column lockreg adds to Spring
-- Integration's INT_LOCK. Its default keeps Spring's statements working, so
-- this also upgrades a table that Spring created. MySQL has no ADD COLUMN IF
-- NOT EXISTS (MariaDB has), so the ALTER is prepared only when the column
-- is missing, and DO 0 (nothing) otherwise.
SET @lockreg_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE INT_LOCK ADD FENCE BIGINT NOT NULL DEFAULT 0', 'DO 0')
	FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'INT_LOCK' AND COLUMN_NAME = 'FENCE');
PREPARE lockreg_ddl FROM @lockreg_ddl;
EXECUTE lockreg_ddl;
DEALLOCATE PREPARE lockreg_ddl;
