-- Fewer index updates per submit (issue #9): a submit inserts a row and then completes
-- it, and every index of `tasks` is written by one or both.
-- `tasks_due (state, next_poll_ms)` serves every query by state (the sweep of rows
-- left submitting, the count of unknown outcomes) as well as `tasks_by_state` did.
DROP INDEX tasks_by_state;
-- A sealed task id is looked up by the provider and upstream id it seals
-- (`tasks_by_upstream`): the listing's cursor. Its own index was a random page of the
-- index written per submit.
DROP INDEX tasks_by_task_id;
-- Only rows with an upstream id are looked up by it: the write-ahead insert (no
-- upstream id yet) adds nothing to this index, and the completion adds its entry
-- instead of moving one.
DROP INDEX tasks_by_upstream;
CREATE INDEX tasks_by_upstream ON tasks (provider, upstream_id) WHERE upstream_id IS NOT NULL;
