-- Webhooks: where a task's outcome is posted, and the deliveries still owed.
ALTER TABLE tasks ADD COLUMN callback_url TEXT;
-- The progress a finished task was reported with, so that a webhook (and a listing)
-- shows what a query shows.
ALTER TABLE tasks ADD COLUMN progress INTEGER;
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_row        INTEGER NOT NULL UNIQUE REFERENCES tasks (id),
    url             TEXT    NOT NULL,
    -- pending, delivered, gone (the receiver answered 410), expired (retried too long)
    state           TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_ms      INTEGER NOT NULL,
    next_attempt_ms INTEGER NOT NULL,
    lease_owner     TEXT,
    lease_until_ms  INTEGER,
    last_status     INTEGER,
    last_error      TEXT,
    finished_ms     INTEGER
);
CREATE INDEX deliveries_due ON deliveries (state, next_attempt_ms);
-- The delivery is owed from the moment the outcome is recorded, in the same
-- transaction: a crash between the two cannot lose it.
CREATE TRIGGER tasks_finished_webhook AFTER UPDATE OF state ON tasks
WHEN NEW.callback_url IS NOT NULL
    AND NEW.state IN ('completed', 'failed')
    AND OLD.state NOT IN ('completed', 'failed')
BEGIN
    INSERT OR IGNORE INTO deliveries (task_row, url, created_ms, next_attempt_ms)
    VALUES (NEW.id, NEW.callback_url, NEW.updated_ms, NEW.updated_ms);
END;
