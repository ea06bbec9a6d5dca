-- +goose Up
-- INT_GROUP_DUE_PIX: the due groups' index, partial. 000003's
-- INT_GROUP_DUE_IX (REGION, DUE_AT) covered every group, so PostgreSQL's
-- planner, whose statistics of a table analyzed while empty say every
-- condition matches one row, could take it for a look-up of one group by
-- GROUP_KEY and REGION and read every group of the region, where the
-- primary key reads one. The partial index serves only conditions that
-- imply DUE_AT IS NOT NULL, as the timeout runner's DUE_AT <= now does.
CREATE INDEX IF NOT EXISTS INT_GROUP_DUE_PIX ON INT_GROUP (REGION, DUE_AT) WHERE DUE_AT IS NOT NULL;
DROP INDEX IF EXISTS INT_GROUP_DUE_IX;
