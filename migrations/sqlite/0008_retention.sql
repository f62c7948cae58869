-- Retention (issue #34): finished tasks older than `[ledger] keep_days` are deleted.
-- What they counted for in usage stays here, per key, model and UTC day (the day
-- they were submitted on), added by the trigger below as each row goes: usage reads
-- the live rows and these sums, so its totals do not change when a row is pruned.
-- Spend needs nothing: the `spend` table is kept per day already and no trigger
-- takes a deleted row out of it.
CREATE TABLE usage_pruned (
    owner         TEXT    NOT NULL,
    model         TEXT    NOT NULL,
    day           INTEGER NOT NULL,
    tasks         INTEGER NOT NULL,
    submitted     INTEGER NOT NULL,
    completed     INTEGER NOT NULL,
    failed        INTEGER NOT NULL,
    video_seconds INTEGER NOT NULL,
    spent         INTEGER NOT NULL,
    reserved      INTEGER NOT NULL,
    PRIMARY KEY (owner, model, day)
) WITHOUT ROWID;
-- Every deleted row, whatever deletes it: its usage added to its day's sums (the
-- expressions of `record::USAGE`), and the rows that hang off it deleted with it.
CREATE TRIGGER tasks_pruned AFTER DELETE ON tasks
BEGIN
    INSERT INTO usage_pruned (owner, model, day, tasks, submitted, completed, failed,
        video_seconds, spent, reserved)
    VALUES (OLD.owner, OLD.model, OLD.created_ms / 86400000, 1,
        CASE WHEN OLD.upstream_id IS NOT NULL THEN 1 ELSE 0 END,
        CASE WHEN OLD.state = 'completed' THEN 1 ELSE 0 END,
        CASE WHEN OLD.state = 'failed' THEN 1 ELSE 0 END,
        CASE WHEN OLD.upstream_id IS NOT NULL THEN (CASE WHEN OLD.video_seconds BETWEEN 0 AND 3600 THEN OLD.video_seconds ELSE 3600 END) ELSE 0 END,
        COALESCE(OLD.cost_settled, 0),
        CASE WHEN OLD.cost_settled IS NULL THEN COALESCE(OLD.cost_estimate, 0) ELSE 0 END)
    ON CONFLICT (owner, model, day) DO UPDATE SET
        tasks = tasks + excluded.tasks,
        submitted = submitted + excluded.submitted,
        completed = completed + excluded.completed,
        failed = failed + excluded.failed,
        video_seconds = video_seconds + excluded.video_seconds,
        spent = spent + excluded.spent,
        reserved = reserved + excluded.reserved;
    DELETE FROM deliveries WHERE task_row = OLD.id;
    DELETE FROM copies WHERE task_row = OLD.id;
    DELETE FROM results WHERE task_row = OLD.id;
END;
