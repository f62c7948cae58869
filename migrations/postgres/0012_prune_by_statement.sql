-- Retention's deletes summed per statement rather than per row (issue #34, item 3).
-- The row trigger of 0009 ran four statements for every pruned task (its usage added
-- to its day's sums, then its delivery, copy and results deleted): a batch of 100
-- was 400 statements, and 100 new versions of the same few `usage_pruned` rows. Here
-- a statement trigger sees the batch's deleted rows at once (a transition table) and
-- does the same in four statements per batch.
--
-- The rows hanging off a task are deleted after it, by that trigger, so their
-- foreign keys are checked at the commit (deferred) rather than at each row's
-- delete. A task is only ever deleted by retention.
ALTER TABLE deliveries
    DROP CONSTRAINT deliveries_task_row_fkey,
    ADD CONSTRAINT deliveries_task_row_fkey FOREIGN KEY (task_row) REFERENCES tasks (id)
        DEFERRABLE INITIALLY DEFERRED NOT VALID;
ALTER TABLE deliveries VALIDATE CONSTRAINT deliveries_task_row_fkey;
ALTER TABLE copies
    DROP CONSTRAINT copies_task_row_fkey,
    ADD CONSTRAINT copies_task_row_fkey FOREIGN KEY (task_row) REFERENCES tasks (id)
        DEFERRABLE INITIALLY DEFERRED NOT VALID;
ALTER TABLE copies VALIDATE CONSTRAINT copies_task_row_fkey;
ALTER TABLE results
    DROP CONSTRAINT results_task_row_fkey,
    ADD CONSTRAINT results_task_row_fkey FOREIGN KEY (task_row) REFERENCES tasks (id)
        DEFERRABLE INITIALLY DEFERRED NOT VALID;
ALTER TABLE results VALIDATE CONSTRAINT results_task_row_fkey;

DROP TRIGGER tasks_pruned ON tasks;
DROP FUNCTION mediagate_pruned();

-- The deleted rows' usage added to their days' sums (the expressions of
-- `record::USAGE`, as in 0009), and the rows hanging off them deleted.
CREATE FUNCTION mediagate_pruned_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_pruned AS u (owner, model, day, tasks, submitted, completed, failed,
        video_seconds, spent, reserved)
    SELECT owner, model, created_ms / 86400000, COUNT(*),
        SUM(CASE WHEN upstream_id IS NOT NULL THEN 1 ELSE 0 END),
        SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END),
        SUM(CASE WHEN state = 'failed' THEN 1 ELSE 0 END),
        SUM(CASE WHEN upstream_id IS NOT NULL THEN (CASE WHEN video_seconds BETWEEN 0 AND 3600 THEN video_seconds ELSE 3600 END) ELSE 0 END),
        SUM(COALESCE(cost_settled, 0)),
        SUM(CASE WHEN cost_settled IS NULL THEN COALESCE(cost_estimate, 0) ELSE 0 END)
    FROM gone
    GROUP BY owner, model, created_ms / 86400000
    ON CONFLICT (owner, model, day) DO UPDATE SET
        tasks = u.tasks + EXCLUDED.tasks,
        submitted = u.submitted + EXCLUDED.submitted,
        completed = u.completed + EXCLUDED.completed,
        failed = u.failed + EXCLUDED.failed,
        video_seconds = u.video_seconds + EXCLUDED.video_seconds,
        spent = u.spent + EXCLUDED.spent,
        reserved = u.reserved + EXCLUDED.reserved;
    DELETE FROM deliveries WHERE task_row IN (SELECT id FROM gone);
    DELETE FROM copies WHERE task_row IN (SELECT id FROM gone);
    DELETE FROM results WHERE task_row IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_pruned AFTER DELETE ON tasks
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT
EXECUTE FUNCTION mediagate_pruned_rows();
