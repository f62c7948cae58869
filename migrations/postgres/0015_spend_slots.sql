-- An owner's spend per day in slots (issue #31). Every priced insert added its
-- estimate to the owner's one `spend` row of the day, and held that row's lock until
-- its commit: the batches of a priced model's submits on other connections (serving
-- threads, replicas) waited for one another's commits, even without a budget. Each
-- connection now adds to a row of its own slot (its backend's pid modulo 16); the
-- rows of an owner's day are summed, as the budget's and the usage's reads already
-- sum an owner's days. A settlement adds its difference to its own slot's row, which
-- may then be negative; only the sums mean anything.
ALTER TABLE spend ADD COLUMN slot INT NOT NULL DEFAULT 0;
ALTER TABLE spend DROP CONSTRAINT spend_pkey;
ALTER TABLE spend ADD PRIMARY KEY (owner, day, slot);

-- The slot of this connection's additions. One per connection, so that a batch's
-- rows (ordered by owner) lock one row per owner and day, in owner order.
CREATE FUNCTION mediagate_spend_slot() RETURNS INT LANGUAGE sql STABLE AS $$
    SELECT pg_backend_pid() % 16
$$;

-- Adds p_micros (of either sign) to p_owner's spend on p_day.
CREATE FUNCTION mediagate_add_spend(p_owner TEXT, p_day BIGINT, p_micros BIGINT)
RETURNS VOID LANGUAGE sql AS $$
    INSERT INTO spend (owner, day, slot, micros)
    VALUES (p_owner, p_day, mediagate_spend_slot(), p_micros)
    ON CONFLICT (owner, day, slot) DO UPDATE SET micros = spend.micros + EXCLUDED.micros
$$;

-- The reservations of a statement's rows, added per owner and day at once: one
-- upsert per statement (a batch of up to 64 submits), not a trigger call and an
-- upsert per row, which were most of the server's work for a priced submit.
DROP TRIGGER tasks_reserve ON tasks;
CREATE OR REPLACE FUNCTION mediagate_reserve() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO spend (owner, day, slot, micros)
    SELECT owner, created_ms / 86400000, mediagate_spend_slot(), SUM(cost_estimate)
    FROM new_tasks WHERE cost_estimate IS NOT NULL
    GROUP BY owner, created_ms / 86400000 ORDER BY 1, 2
    ON CONFLICT (owner, day, slot) DO UPDATE SET micros = spend.micros + EXCLUDED.micros;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_reserve AFTER INSERT ON tasks
REFERENCING NEW TABLE AS new_tasks
FOR EACH STATEMENT EXECUTE FUNCTION mediagate_reserve();

CREATE OR REPLACE FUNCTION mediagate_settle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM mediagate_add_spend(NEW.owner, NEW.created_ms / 86400000,
        NEW.cost_settled - NEW.cost_estimate);
    RETURN NULL;
END
$$;
