-- A webhook is owed only for a task its client has an id of. A task of unknown outcome
-- (its submit's answer never came: the client got an error, no id) that the operator
-- resolves ends with no id, and its delivery could never be made: it was retried
-- for `retry_for_hours`, failing each time. Those already owed are given up.
DROP TRIGGER tasks_finished_webhook;
CREATE TRIGGER tasks_finished_webhook AFTER UPDATE OF finished_ms ON tasks
WHEN NEW.callback_url IS NOT NULL
    AND NEW.task_id IS NOT NULL
    AND NEW.state IN ('completed', 'failed')
    AND OLD.state NOT IN ('completed', 'failed')
BEGIN
    INSERT OR IGNORE INTO deliveries (task_row, url, created_ms, next_attempt_ms)
    VALUES (NEW.id, NEW.callback_url, NEW.updated_ms, NEW.updated_ms);
END;
UPDATE deliveries SET state = 'expired', last_error = 'the task has no id: its client never had one', lease_owner = NULL, lease_until_ms = NULL, finished_ms = next_attempt_ms
WHERE state = 'pending' AND task_row IN (SELECT id FROM tasks WHERE task_id IS NULL);
