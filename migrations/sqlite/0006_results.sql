-- Durable results: a completed task's media copied into storage, so that its links
-- outlive the provider's.
-- Days to keep the task's results, set at submit when its family keeps them and
-- storage is on; NULL: nothing is copied.
ALTER TABLE tasks ADD COLUMN keep_days INTEGER;
-- Set when the task's owner deleted it (DELETE …/{id}): it leaves listings; the row
-- stays for usage.
ALTER TABLE tasks ADD COLUMN deleted_ms INTEGER;
-- The copies owed: one per completed task that keeps its results.
CREATE TABLE copies (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_row        INTEGER NOT NULL UNIQUE REFERENCES tasks (id),
    -- pending, stored, skipped (too large, or gone at the provider), failed (retried too long)
    state           TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_ms      INTEGER NOT NULL,
    next_attempt_ms INTEGER NOT NULL,
    lease_owner     TEXT,
    lease_until_ms  INTEGER,
    last_error      TEXT,
    finished_ms     INTEGER
);
CREATE INDEX copies_due ON copies (state, next_attempt_ms);
-- Each result stored: where, how big, what type, its SHA-256, and until when.
CREATE TABLE results (
    task_row     INTEGER NOT NULL REFERENCES tasks (id),
    n            INTEGER NOT NULL,
    object_key   TEXT    NOT NULL,
    bytes        INTEGER NOT NULL,
    content_type TEXT,
    sha256       TEXT    NOT NULL,
    stored_ms    INTEGER NOT NULL,
    expires_ms   INTEGER NOT NULL,
    -- Set when the object was deleted (expired, or the task was deleted).
    deleted_ms   INTEGER,
    PRIMARY KEY (task_row, n)
);
CREATE INDEX results_expiring ON results (expires_ms) WHERE deleted_ms IS NULL;
-- The copy is owed from the moment the completion is recorded, in the same
-- transaction, as a webhook's delivery is.
CREATE TRIGGER tasks_finished_copy AFTER UPDATE OF finished_ms ON tasks
WHEN NEW.keep_days IS NOT NULL
    AND NEW.state = 'completed'
    AND OLD.state NOT IN ('completed', 'failed')
BEGIN
    INSERT OR IGNORE INTO copies (task_row, created_ms, next_attempt_ms)
    VALUES (NEW.id, NEW.updated_ms, NEW.updated_ms);
END;
