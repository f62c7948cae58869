-- Replicas follow tasks rather than lease a row per status request (issue #34): a
-- task's `lease_owner` names the replica that follows it, for as long as that replica
-- is alive, and the replica keeps the task's schedule in memory; only what changes is
-- written back. A replica proves it is alive by its row here, refreshed every quarter
-- of `[tracker] lease_ms`; the tasks of a replica whose row expired are claimed by
-- the others.
CREATE TABLE replicas (
    name TEXT PRIMARY KEY,
    alive_until_ms BIGINT NOT NULL
);
-- The leases of the per-poll scheme hold nothing now: every unfinished task is
-- claimed afresh.
UPDATE tasks SET lease_owner = NULL, lease_until_ms = NULL WHERE state = 'submitted' AND lease_owner IS NOT NULL;
-- Unfinished tasks are now found by their follower (none: new submits, tasks given
-- back; a dead replica's), no longer by their next poll, which the follower keeps.
-- Still the index of states for every query by state.
DROP INDEX tasks_due;
CREATE INDEX tasks_due ON tasks (state, lease_owner);
