-- Durable results: a completed task's media copied into storage, so that its links
-- outlive the provider's.
-- Days to keep the task's results, set at submit when its family keeps them and
-- storage is on; NULL: nothing is copied.
ALTER TABLE tasks ADD COLUMN keep_days BIGINT;
-- Set when the task's owner deleted it (DELETE …/{id}): it leaves listings; the row
-- stays for usage.
ALTER TABLE tasks ADD COLUMN deleted_ms BIGINT;
-- The copies owed: one per completed task that keeps its results.
CREATE TABLE copies (
    id              BIGSERIAL PRIMARY KEY,
    task_row        BIGINT  NOT NULL UNIQUE REFERENCES tasks (id),
    -- pending, stored, skipped (too large, or gone at the provider), failed (retried too long)
    state           TEXT    NOT NULL DEFAULT 'pending',
    attempts        BIGINT  NOT NULL DEFAULT 0,
    created_ms      BIGINT  NOT NULL,
    next_attempt_ms BIGINT  NOT NULL,
    lease_owner     TEXT,
    lease_until_ms  BIGINT,
    last_error      TEXT,
    finished_ms     BIGINT
);
CREATE INDEX copies_due ON copies (state, next_attempt_ms);
-- Each result stored: where, how big, what type, its SHA-256, and until when.
CREATE TABLE results (
    task_row     BIGINT  NOT NULL REFERENCES tasks (id),
    n            BIGINT  NOT NULL,
    object_key   TEXT    NOT NULL,
    bytes        BIGINT  NOT NULL,
    content_type TEXT,
    sha256       TEXT    NOT NULL,
    stored_ms    BIGINT  NOT NULL,
    expires_ms   BIGINT  NOT NULL,
    -- Set when the object was deleted (expired, or the task was deleted).
    deleted_ms   BIGINT,
    PRIMARY KEY (task_row, n)
);
CREATE INDEX results_expiring ON results (expires_ms) WHERE deleted_ms IS NULL;
-- The copy is owed from the moment the completion is recorded, in the same
-- transaction, as a webhook's delivery is.
CREATE FUNCTION mediagate_owe_copy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO copies (task_row, created_ms, next_attempt_ms)
    VALUES (NEW.id, NEW.updated_ms, NEW.updated_ms)
    ON CONFLICT (task_row) DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_finished_copy AFTER UPDATE OF state ON tasks
FOR EACH ROW
WHEN (NEW.keep_days IS NOT NULL
    AND NEW.state = 'completed'
    AND OLD.state NOT IN ('completed', 'failed'))
EXECUTE FUNCTION mediagate_owe_copy();
