-- +goose Down
-- Removes what 000004 added; each DROP is prepared only when the column
-- exists.
SET @lockreg_ddl = (SELECT IF(COUNT(*) = 1, 'ALTER TABLE INT_LOCK DROP COLUMN HOLDER', 'DO 0')
	FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'INT_LOCK' AND COLUMN_NAME = 'HOLDER');
PREPARE lockreg_ddl FROM @lockreg_ddl;
EXECUTE lockreg_ddl;
DEALLOCATE PREPARE lockreg_ddl;
SET @lockreg_ddl = (SELECT IF(COUNT(*) = 1, 'ALTER TABLE INT_LOCK DROP COLUMN LOCK_NAME', 'DO 0')
	FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'INT_LOCK' AND COLUMN_NAME = 'LOCK_NAME');
PREPARE lockreg_ddl FROM @lockreg_ddl;
EXECUTE lockreg_ddl;
DEALLOCATE PREPARE lockreg_ddl;
