-- A webhook is owed only for a task its client has an id of. A task of unknown outcome
-- (its submit's answer never came: the client got an error, no id) that the operator
-- resolves ends with no id, and its delivery could never be made: it was retried
-- for `retry_for_hours`, failing each time. Those already owed are given up.
DROP TRIGGER tasks_finished_webhook ON tasks;
CREATE TRIGGER tasks_finished_webhook AFTER UPDATE OF state ON tasks
FOR EACH ROW
WHEN (NEW.callback_url IS NOT NULL
    AND NEW.task_id IS NOT NULL
    AND NEW.state IN ('completed', 'failed')
    AND OLD.state NOT IN ('completed', 'failed'))
EXECUTE FUNCTION mediagate_owe_webhook();
UPDATE deliveries SET state = 'expired', last_error = 'the task has no id: its client never had one', lease_owner = NULL, lease_until_ms = NULL, finished_ms = next_attempt_ms
WHERE state = 'pending' AND task_row IN (SELECT id FROM tasks WHERE task_id IS NULL);
