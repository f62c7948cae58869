-- Budgets granted ahead (issue #31). A replica where a key with a budget submits fast
-- takes a share of what the budget has left (a grant) in one transaction under the
-- owner's lock, and admits that key's submits against it with the plain insert: no
-- lock, no read of `spend`, no write to it. The grant is part of the owner's spend from
-- the moment it is taken, so every other admission (any replica's) sees it as
-- reserved, and what all grants and reservations add up to never passes the budget.
--
-- A task admitted against a grant names it (`budget_grant`); its estimate is already
-- in `spend` (in the grant), so the reservation trigger leaves it out. Settlement is
-- unchanged: the settled cost less the estimate, on the task's day.
--
-- A grant is given back (mediagate_give_back) when its replica is done with it, or by
-- anyone once it has expired: what its tasks did not reserve leaves `spend`. An insert
-- against a grant holds the grant's row (FOR KEY SHARE) until it commits, and finds
-- nothing to insert against once the grant is given back or expired, so a give-back
-- counts every task of its grant, and no task counts on a grant given back.
CREATE TABLE budget_grants (
    id         BIGSERIAL PRIMARY KEY,
    owner      TEXT   NOT NULL,
    -- The UTC day (days since the epoch) whose spend holds the grant; its tasks are
    -- submitted on that day.
    day        BIGINT NOT NULL,
    micros     BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX budget_grants_by_owner ON budget_grants (owner);
ALTER TABLE tasks ADD COLUMN budget_grant BIGINT;

-- The server's clock, which decides when a grant expires for every replica.
CREATE FUNCTION mediagate_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)
$$;

-- Reservations leave out the rows admitted against a grant (migration 0015's
-- statement-level trigger).
CREATE OR REPLACE FUNCTION mediagate_reserve() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO spend (owner, day, slot, micros)
    SELECT owner, created_ms / 86400000, mediagate_spend_slot(), SUM(cost_estimate)
    FROM new_tasks WHERE cost_estimate IS NOT NULL AND budget_grant IS NULL
    GROUP BY owner, created_ms / 86400000 ORDER BY 1, 2
    ON CONFLICT (owner, day, slot) DO UPDATE SET micros = spend.micros + EXCLUDED.micros;
    RETURN NULL;
END
$$;

-- Grants p_ids given back: what their tasks did not reserve leaves their owners'
-- spend. The owners' locks first, in the order admissions take them; then the grants'
-- rows in id order, the order inserts hold them in (postgres_submits.rs), so that
-- neither can deadlock with a give-back. The DELETE waits for the inserts holding a
-- grant; the sums after it, statements of their own, see what those committed.
CREATE FUNCTION mediagate_give_back(p_ids BIGINT[]) RETURNS INT LANGUAGE plpgsql AS $$
DECLARE
    h INT;
    g RECORD;
    used BIGINT;
    n INT := 0;
    ids BIGINT[];
    owners TEXT[];
    days BIGINT[];
    amounts BIGINT[];
BEGIN
    FOR h IN SELECT DISTINCT hashtext(owner) FROM budget_grants WHERE id = ANY(p_ids) ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(h);
    END LOOP;
    PERFORM 1 FROM budget_grants WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    WITH gone AS (
        DELETE FROM budget_grants WHERE id = ANY(p_ids) RETURNING id, owner, day, micros
    )
    SELECT array_agg(id), array_agg(owner), array_agg(day), array_agg(micros)
    INTO ids, owners, days, amounts FROM gone;
    FOR g IN SELECT x.owner, x.day, SUM(x.micros) AS micros, array_agg(x.id) AS ids
        FROM unnest(ids, owners, days, amounts) AS x(id, owner, day, micros)
        GROUP BY x.owner, x.day ORDER BY x.owner, x.day
    LOOP
        SELECT CAST(COALESCE(SUM(cost_estimate), 0) AS BIGINT) INTO used FROM tasks
        WHERE budget_grant = ANY(g.ids);
        PERFORM mediagate_add_spend(g.owner, g.day, CAST(used - g.micros AS BIGINT));
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
CREATE INDEX tasks_by_budget_grant ON tasks (budget_grant) WHERE budget_grant IS NOT NULL;

-- Every expired grant (of p_owner, or of all owners when NULL) given back: those of a
-- replica that died, or whose give-back was lost.
CREATE FUNCTION mediagate_give_back_expired(p_owner TEXT) RETURNS INT LANGUAGE sql AS $$
    SELECT mediagate_give_back(ARRAY(
        SELECT id FROM budget_grants
        WHERE (p_owner IS NULL OR owner = p_owner) AND expires_ms < mediagate_now_ms()))
$$;

-- A grant of at most p_want for p_owner on day p_day, under the owner's lock (the one
-- admissions take): at most a sixteenth of what the budget has left (day and month,
-- every reservation and grant counted), none when that is below p_least. It expires
-- after p_lifetime_ms of the server's clock.
CREATE FUNCTION mediagate_take_grant(
    p_owner TEXT, p_day BIGINT, p_month_day BIGINT, p_budget_day BIGINT,
    p_budget_month BIGINT, p_want BIGINT, p_least BIGINT, p_lifetime_ms BIGINT,
    OUT grant_id BIGINT, OUT micros BIGINT, OUT expires_ms BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    spent_day BIGINT;
    spent_month BIGINT;
    room NUMERIC;
    now_ms BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(p_owner));
    PERFORM mediagate_give_back_expired(p_owner);
    SELECT CAST(COALESCE(SUM(CASE WHEN day = p_day THEN s.micros ELSE 0 END), 0) AS BIGINT),
        CAST(COALESCE(SUM(s.micros), 0) AS BIGINT)
    INTO spent_day, spent_month
    FROM spend s WHERE owner = p_owner AND day >= p_month_day;
    room := LEAST(
        COALESCE(p_budget_day::NUMERIC - spent_day, p_want::NUMERIC * 16),
        COALESCE(p_budget_month::NUMERIC - spent_month, p_want::NUMERIC * 16));
    micros := LEAST(p_want::NUMERIC, floor(room / 16));
    IF micros < p_least OR micros <= 0 THEN
        micros := NULL;
        RETURN;
    END IF;
    now_ms := mediagate_now_ms();
    expires_ms := now_ms + p_lifetime_ms;
    INSERT INTO budget_grants (owner, day, micros, created_ms, expires_ms)
    VALUES (p_owner, p_day, micros, now_ms, expires_ms)
    RETURNING id INTO grant_id;
    PERFORM mediagate_add_spend(p_owner, p_day, micros);
END
$$;
