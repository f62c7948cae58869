-- A key's usage of a day that is over, summed once (issue #34): a month read from
-- these sums rather than from each of its tasks' rows (at 10 M rows, a key's 1,700
-- rows of a month, scattered over as many pages, took 8 ms; the sums are a few rows).
--
-- A day's sums are made when a usage read asks for the day, a day after it ended
-- (`src/tasks/ledger/sqlite_usage.rs`), by background writes of a few rows each;
-- the last adds what retention kept of the day's pruned tasks: whole, the sums are
-- the day's whole usage, so a prune changes nothing in them.
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
-- The days being summed or summed: the day's rows are in the sums up to
-- `summed_to_ms`; the sums are whole (and read) once it is the day's end.
CREATE TABLE usage_closed_days (
    owner        TEXT    NOT NULL,
    day          INTEGER NOT NULL,
    summed_to_ms INTEGER NOT NULL,
    PRIMARY KEY (owner, day)
) WITHOUT ROWID;
-- A change to a day being summed or summed takes its sums away; a later read makes
-- them again. Usage counts `upstream_id`, `state`, `video_seconds`, `cost_estimate`
-- and `cost_settled`. After a task's submit, only the updates that end it (they set
-- `finished_ms`: an end, a refusal, an operator's resolve) change them. The submit's
-- answer (`upstream_id`, `state`) comes within `server.request_timeout_ms` (an hour
-- at most) of the row, so never to a day over by a day; a day with a row still
-- `submitting` (its gateway stopped before its sweep) gets no sums all the same. A
-- row added to the day (the clock set back a day or more), or pruned while its day
-- is being summed (it would move to `usage_pruned` after its part was summed, and be
-- counted twice), takes them away too.
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
CREATE TRIGGER usage_closed_pruned AFTER DELETE ON tasks
WHEN EXISTS (SELECT 1 FROM usage_closed_days
             WHERE owner = OLD.owner AND day = OLD.created_ms / 86400000
                 AND summed_to_ms < (day + 1) * 86400000)
BEGIN
    DELETE FROM usage_closed WHERE owner = OLD.owner AND day = OLD.created_ms / 86400000;
    DELETE FROM usage_closed_days WHERE owner = OLD.owner AND day = OLD.created_ms / 86400000;
END;
