-- The webhook's trigger, fired by the update that records a task's end (it sets
-- `finished_ms` with the terminal state) instead of by every update of `state`.
-- SQLite runs an update that a trigger may follow in a statement journal (each page
-- it changes copied first, to undo the statement alone if the trigger fails):
-- `AFTER UPDATE OF state` made every submit's completion (`submitting` →
-- `submitted`) pay for it although its trigger never fires.
DROP TRIGGER tasks_finished_webhook;
CREATE TRIGGER tasks_finished_webhook AFTER UPDATE OF finished_ms ON tasks
WHEN NEW.callback_url IS NOT NULL
    AND NEW.state IN ('completed', 'failed')
    AND OLD.state NOT IN ('completed', 'failed')
BEGIN
    INSERT OR IGNORE INTO deliveries (task_row, url, created_ms, next_attempt_ms)
    VALUES (NEW.id, NEW.callback_url, NEW.updated_ms, NEW.updated_ms);
END;
