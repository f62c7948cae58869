-- Webhooks: where a task's outcome is posted, and the deliveries still owed.
ALTER TABLE tasks ADD COLUMN callback_url TEXT;
-- The progress a finished task was reported with, so that a webhook (and a listing)
-- shows what a query shows.
ALTER TABLE tasks ADD COLUMN progress BIGINT;
CREATE TABLE deliveries (
    id              BIGSERIAL PRIMARY KEY,
    task_row        BIGINT  NOT NULL UNIQUE REFERENCES tasks (id),
    url             TEXT    NOT NULL,
    -- pending, delivered, gone (the receiver answered 410), expired (retried too long)
    state           TEXT    NOT NULL DEFAULT 'pending',
    attempts        BIGINT  NOT NULL DEFAULT 0,
    created_ms      BIGINT  NOT NULL,
    next_attempt_ms BIGINT  NOT NULL,
    lease_owner     TEXT,
    lease_until_ms  BIGINT,
    last_status     BIGINT,
    last_error      TEXT,
    finished_ms     BIGINT
);
CREATE INDEX deliveries_due ON deliveries (state, next_attempt_ms);
-- The delivery is owed from the moment the outcome is recorded, in the same
-- transaction: a crash between the two cannot lose it.
CREATE FUNCTION mediagate_owe_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deliveries (task_row, url, created_ms, next_attempt_ms)
    VALUES (NEW.id, NEW.callback_url, NEW.updated_ms, NEW.updated_ms)
    ON CONFLICT (task_row) DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_finished_webhook AFTER UPDATE OF state ON tasks
FOR EACH ROW
WHEN (NEW.callback_url IS NOT NULL
    AND NEW.state IN ('completed', 'failed')
    AND OLD.state NOT IN ('completed', 'failed'))
EXECUTE FUNCTION mediagate_owe_webhook();
