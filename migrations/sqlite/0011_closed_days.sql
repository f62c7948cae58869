-- A key's usage of a day that is over, summed once (issue #34): a month read from
-- these sums rather than from each of its tasks' rows (at 10 M rows, 1,700 rows
-- scattered over as many pages took 8 ms; the sums take a few rows).
--
-- A day's sums are made when a usage read asks for the day, a day after it ended
-- (`sqlite_usage.rs`), by one write that reads the day's tasks and what retention
-- kept of its pruned ones: the sums are the day's whole usage, so a prune changes
-- nothing here. `usage_closed_days` says which days have sums, also days with
-- no tasks (which have no sums).
CREATE TABLE usage_closed (
    owner         TEXT    NOT NULL,
    day           INTEGER NOT NULL,
    model         TEXT    NOT NULL,
    submitted     INTEGER NOT NULL,
    completed     INTEGER NOT NULL,
    failed        INTEGER NOT NULL,
    video_seconds INTEGER NOT NULL,
    spent         INTEGER NOT NULL,
    reserved      INTEGER NOT NULL,
    PRIMARY KEY (owner, day, model)
) WITHOUT ROWID;
CREATE TABLE usage_closed_days (
    owner TEXT    NOT NULL,
    day   INTEGER NOT NULL,
    PRIMARY KEY (owner, day)
) WITHOUT ROWID;
-- A change to a day with sums takes them away; the next read makes them again.
-- Usage counts `upstream_id`, `state`, `video_seconds`, `cost_estimate` and
-- `cost_settled`. After a task's submit, only the updates that end it (they set
-- `finished_ms`: an end, a refusal, an operator's resolve) change them; a day gets
-- sums only when none of its rows is still being submitted. A row added to such a
-- day (the clock set back a day or more) takes them away too.
CREATE TRIGGER usage_closed_ended AFTER UPDATE OF finished_ms ON tasks
WHEN EXISTS (SELECT 1 FROM usage_closed_days
             WHERE owner = OLD.owner AND day = OLD.created_ms / 86400000)
BEGIN
    DELETE FROM usage_closed WHERE owner = OLD.owner AND day = OLD.created_ms / 86400000;
    DELETE FROM usage_closed_days WHERE owner = OLD.owner AND day = OLD.created_ms / 86400000;
END;
CREATE TRIGGER usage_closed_added AFTER INSERT ON tasks
WHEN EXISTS (SELECT 1 FROM usage_closed_days
             WHERE owner = NEW.owner AND day = NEW.created_ms / 86400000)
BEGIN
    DELETE FROM usage_closed WHERE owner = NEW.owner AND day = NEW.created_ms / 86400000;
    DELETE FROM usage_closed_days WHERE owner = NEW.owner AND day = NEW.created_ms / 86400000;
END;
