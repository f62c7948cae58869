-- The background tracker: when a task is polled next, how often, and who holds it.
ALTER TABLE tasks ADD COLUMN next_poll_ms BIGINT;
ALTER TABLE tasks ADD COLUMN poll_interval_ms BIGINT;
ALTER TABLE tasks ADD COLUMN lease_owner TEXT;
ALTER TABLE tasks ADD COLUMN lease_until_ms BIGINT;
CREATE INDEX tasks_due ON tasks (state, next_poll_ms);
