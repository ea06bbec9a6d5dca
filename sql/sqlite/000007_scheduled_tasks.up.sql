-- +goose Up
-- db-scheduler's table (sqlite_tables.sql, v16.12), for package scheduler
-- and Java's db-scheduler alike; the times are epoch milliseconds.
CREATE TABLE IF NOT EXISTS scheduled_tasks (
  task_name varchar(100),
  task_instance varchar(100),
  task_data BLOB,
  execution_time TIMESTAMP,
  picked BIT,
  picked_by varchar(50),
  last_success TIMESTAMP,
  last_failure TIMESTAMP,
  consecutive_failures INT,
  last_heartbeat TIMESTAMP,
  version BIGINT,
  priority SMALLINT,
  PRIMARY KEY (task_name, task_instance)
);
CREATE INDEX IF NOT EXISTS execution_time_idx ON scheduled_tasks (execution_time);
CREATE INDEX IF NOT EXISTS last_heartbeat_idx ON scheduled_tasks (last_heartbeat);
CREATE INDEX IF NOT EXISTS priority_execution_time_idx ON scheduled_tasks (priority desc, execution_time asc);
