-- Retention (issue #34): finished tasks older than `[ledger] keep_days` are deleted.
-- What they counted for in usage stays here, per key, model and UTC day (the day
-- they were submitted on), added by the trigger below as each row goes: usage reads
-- the live rows and these sums, so its totals do not change when a row is pruned.
-- Spend needs nothing: the `spend` table is kept per day already and no trigger
-- takes a deleted row out of it.
CREATE TABLE usage_pruned (
    owner         TEXT   NOT NULL,
    model         TEXT   NOT NULL,
    day           BIGINT NOT NULL,
    tasks         BIGINT NOT NULL,
    submitted     BIGINT NOT NULL,
    completed     BIGINT NOT NULL,
    failed        BIGINT NOT NULL,
    video_seconds BIGINT NOT NULL,
    spent         BIGINT NOT NULL,
    reserved      BIGINT NOT NULL,
    PRIMARY KEY (owner, model, day)
);
-- Every deleted row, whatever deletes it: its usage added to its day's sums (the
-- expressions of `record::USAGE`), and the rows that hang off it deleted first (their
-- foreign keys are checked at the end of the statement).
CREATE FUNCTION mediagate_pruned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_pruned AS u (owner, model, day, tasks, submitted, completed, failed,
        video_seconds, spent, reserved)
    VALUES (OLD.owner, OLD.model, OLD.created_ms / 86400000, 1,
        CASE WHEN OLD.upstream_id IS NOT NULL THEN 1 ELSE 0 END,
        CASE WHEN OLD.state = 'completed' THEN 1 ELSE 0 END,
        CASE WHEN OLD.state = 'failed' THEN 1 ELSE 0 END,
        CASE WHEN OLD.upstream_id IS NOT NULL THEN (CASE WHEN OLD.video_seconds BETWEEN 0 AND 3600 THEN OLD.video_seconds ELSE 3600 END) ELSE 0 END,
        COALESCE(OLD.cost_settled, 0),
        CASE WHEN OLD.cost_settled IS NULL THEN COALESCE(OLD.cost_estimate, 0) ELSE 0 END)
    ON CONFLICT (owner, model, day) DO UPDATE SET
        tasks = u.tasks + EXCLUDED.tasks,
        submitted = u.submitted + EXCLUDED.submitted,
        completed = u.completed + EXCLUDED.completed,
        failed = u.failed + EXCLUDED.failed,
        video_seconds = u.video_seconds + EXCLUDED.video_seconds,
        spent = u.spent + EXCLUDED.spent,
        reserved = u.reserved + EXCLUDED.reserved;
    DELETE FROM deliveries WHERE task_row = OLD.id;
    DELETE FROM copies WHERE task_row = OLD.id;
    DELETE FROM results WHERE task_row = OLD.id;
    RETURN OLD;
END
$$;
CREATE TRIGGER tasks_pruned BEFORE DELETE ON tasks
FOR EACH ROW
EXECUTE FUNCTION mediagate_pruned();
