-- The task ledger: one row per submit that reached the provider step.
CREATE TABLE tasks (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    owner           TEXT    NOT NULL,
    endpoint        TEXT    NOT NULL,
    model           TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    idempotency_key TEXT,
    video_seconds   INTEGER NOT NULL DEFAULT 0,
    state           TEXT    NOT NULL,
    status          TEXT,
    provider        TEXT,
    upstream_id     TEXT,
    task_id         TEXT,
    answer_status   INTEGER,
    answer_body     TEXT,
    urls            TEXT,
    error_code      TEXT,
    error_message   TEXT,
    created_ms      INTEGER NOT NULL,
    updated_ms      INTEGER NOT NULL,
    finished_ms     INTEGER
);
CREATE UNIQUE INDEX tasks_idempotency ON tasks (owner, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_by_owner ON tasks (owner, endpoint, id);
CREATE INDEX tasks_by_upstream ON tasks (provider, upstream_id);
CREATE INDEX tasks_by_task_id ON tasks (task_id);
CREATE INDEX tasks_by_state ON tasks (state, updated_ms);
CREATE INDEX tasks_by_day ON tasks (owner, created_ms);
