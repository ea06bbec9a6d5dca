-- +goose Up
-- INT_GROUP_DUE_PIX: the due groups' index, partial. The 000003 of lockreg
-- before 2026-12 made INT_GROUP_DUE_IX (REGION, DUE_AT) over every group,
-- which PostgreSQL's planner could take for a look-up of one group by
-- GROUP_KEY and REGION when its statistics knew the region as rare (a
-- region newer than the last ANALYZE), reading every group of the region
-- where the primary key reads one. The partial index serves only
-- conditions that imply DUE_AT IS NOT NULL, as the timeout runner's
-- DUE_AT <= now does. 000003 makes it now; this script replaces the old
-- index where an earlier 000003 made it (the DROP locks the table for a
-- moment, once).
CREATE INDEX IF NOT EXISTS INT_GROUP_DUE_PIX ON INT_GROUP (REGION, DUE_AT) WHERE DUE_AT IS NOT NULL;
DROP INDEX IF EXISTS INT_GROUP_DUE_IX;
