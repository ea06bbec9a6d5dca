-- +goose Up
-- The probe's summary on PostgreSQL (groupstore.Probe, the resequencer's
-- check for a second message of the same number or another sequence size):
-- the group row keeps the values of its unreleased messages under the
-- probe's keys, so that an Add can tell the fit from the row it updates
-- anyway instead of reading the group's messages. PROBE_KEYS names the
-- keys, PROBE_UNIQUE holds the values under the first, PROBE_SAME the value
-- they all share under the second (NULL if they differ), and PROBE_VERSION
-- the VERSION the summary is true for: every other change of the group
-- changes VERSION, which leaves the summary behind until an Add that probes
-- builds it again. NULL columns, which every other statement leaves alone,
-- are an unknown summary; without the columns the probe reads the
-- messages, as before.
ALTER TABLE INT_GROUP ADD COLUMN IF NOT EXISTS PROBE_VERSION BIGINT NULL, ADD COLUMN IF NOT EXISTS PROBE_KEYS TEXT NULL,
	ADD COLUMN IF NOT EXISTS PROBE_UNIQUE BIGINT[] NULL, ADD COLUMN IF NOT EXISTS PROBE_SAME BIGINT NULL;
