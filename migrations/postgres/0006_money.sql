-- Money: each task's estimate (reserved at submit) and settled cost, in millionths
-- of `[billing] currency`; NULL when its model has no price. A task is settled once,
-- by the statement that ends it: completed at its settled price, failed, refused or
-- cancelled at 0; `unknown_outcome` stays reserved until the operator resolves it.
ALTER TABLE tasks ADD COLUMN cost_estimate BIGINT;
ALTER TABLE tasks ADD COLUMN cost_settled BIGINT;
-- The validated parameters, kept only when the model's price settles on them.
ALTER TABLE tasks ADD COLUMN price_params TEXT;
-- What each owner's tasks cost per UTC day (the day they were submitted on): the
-- reservations of unsettled tasks and the settled costs of the others. Kept by the
-- triggers below, in the transactions that write the tasks; budgets read it.
CREATE TABLE spend (
    owner  TEXT   NOT NULL,
    day    BIGINT NOT NULL,
    micros BIGINT NOT NULL,
    PRIMARY KEY (owner, day)
);
CREATE FUNCTION mediagate_reserve() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO spend (owner, day, micros)
    VALUES (NEW.owner, NEW.created_ms / 86400000, NEW.cost_estimate)
    ON CONFLICT (owner, day) DO UPDATE SET micros = spend.micros + EXCLUDED.micros;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_reserve AFTER INSERT ON tasks
FOR EACH ROW
WHEN (NEW.cost_estimate IS NOT NULL)
EXECUTE FUNCTION mediagate_reserve();
CREATE FUNCTION mediagate_settle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE spend SET micros = micros + NEW.cost_settled - NEW.cost_estimate
    WHERE owner = NEW.owner AND day = NEW.created_ms / 86400000;
    RETURN NULL;
END
$$;
-- Every statement that ends a task sets `finished_ms` and, for a priced task,
-- `cost_settled`.
CREATE TRIGGER tasks_settle AFTER UPDATE OF finished_ms ON tasks
FOR EACH ROW
WHEN (NEW.cost_estimate IS NOT NULL
    AND OLD.cost_settled IS NULL
    AND NEW.cost_settled IS NOT NULL)
EXECUTE FUNCTION mediagate_settle();
