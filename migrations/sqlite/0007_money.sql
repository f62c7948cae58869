-- Money: each task's estimate (reserved at submit) and settled cost, in millionths
-- of `[billing] currency`; NULL when its model has no price. A task is settled once,
-- by the statement that ends it: completed at its settled price, failed, refused or
-- cancelled at 0; `unknown_outcome` stays reserved until the operator resolves it.
ALTER TABLE tasks ADD COLUMN cost_estimate INTEGER;
ALTER TABLE tasks ADD COLUMN cost_settled INTEGER;
-- The validated parameters, kept only when the model's price settles on them.
ALTER TABLE tasks ADD COLUMN price_params TEXT;
-- What each owner's tasks cost per UTC day (the day they were submitted on): the
-- reservations of unsettled tasks and the settled costs of the others. Kept by the
-- triggers below, in the transactions that write the tasks; budgets read it.
CREATE TABLE spend (
    owner  TEXT    NOT NULL,
    day    INTEGER NOT NULL,
    micros INTEGER NOT NULL,
    PRIMARY KEY (owner, day)
) WITHOUT ROWID;
CREATE TRIGGER tasks_reserve AFTER INSERT ON tasks
WHEN NEW.cost_estimate IS NOT NULL
BEGIN
    INSERT INTO spend (owner, day, micros)
    VALUES (NEW.owner, NEW.created_ms / 86400000, NEW.cost_estimate)
    ON CONFLICT (owner, day) DO UPDATE SET micros = micros + excluded.micros;
END;
-- Every statement that ends a task sets `finished_ms` (as the webhooks' trigger
-- needs) and, for a priced task, `cost_settled`.
CREATE TRIGGER tasks_settle AFTER UPDATE OF finished_ms ON tasks
WHEN NEW.cost_estimate IS NOT NULL
    AND OLD.cost_settled IS NULL
    AND NEW.cost_settled IS NOT NULL
BEGIN
    UPDATE spend SET micros = micros + NEW.cost_settled - NEW.cost_estimate
    WHERE owner = NEW.owner AND day = NEW.created_ms / 86400000;
END;
