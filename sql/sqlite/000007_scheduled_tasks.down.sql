-- +goose Down
DROP TABLE IF EXISTS scheduled_tasks;
