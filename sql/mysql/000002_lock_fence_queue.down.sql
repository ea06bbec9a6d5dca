-- +goose Down
-- Removes what 000002 added, leaving INT_LOCK as Spring Integration 7
-- creates it. The DROP is prepared only when the column exists, as the ADD
-- in 000002 is.
SET @lockreg_ddl = (SELECT IF(COUNT(*) = 0, 'DO 0', 'ALTER TABLE INT_LOCK DROP COLUMN FENCE')
	FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'INT_LOCK' AND COLUMN_NAME = 'FENCE');
PREPARE lockreg_ddl FROM @lockreg_ddl;
EXECUTE lockreg_ddl;
DEALLOCATE PREPARE lockreg_ddl;
