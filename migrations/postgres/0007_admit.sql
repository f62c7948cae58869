-- Admissions with a quota or a budget, several in one round trip and one commit
-- (issue #31). Replicas agree on what an owner used and spent by taking the owner's
-- lock for the transaction that reads it and inserts the task's row, and that lock
-- is held until the commit is on disk. Done as five statements per submit, the lock
-- was held across five round trips and a flush, and every submit of the key waited
-- for them; here a batch of admissions (mediagate_admit_batch) shares one round trip
-- and one flush, and each admission's work is the function below.
--
-- The verdict stays the gateway's (admission.rs `refusal`, over the figures returned);
-- the comparisons below only keep the row out when those figures say it does not fit,
-- and are the same comparisons (`QuotaConfig::exceeded`, `Budget::exceeded`). The
-- usage read is `record::USED_TODAY`'s, the spend read `record::SPENT`'s (a unit test
-- holds this file to the same expressions).
--
-- row_id: the new row; key_seen: the owner's key is held by an earlier row (nothing
-- read or inserted); else nothing inserted, and used/spent say why.
CREATE FUNCTION mediagate_admit(
    p_owner TEXT, p_endpoint TEXT, p_model TEXT, p_kind TEXT, p_fingerprint TEXT,
    p_key TEXT, p_video_seconds BIGINT, p_now BIGINT, p_provider TEXT,
    p_callback_url TEXT, p_keep_days BIGINT, p_cost BIGINT, p_price_params TEXT,
    p_day_start BIGINT, p_tasks_per_day BIGINT, p_seconds_per_day BIGINT,
    p_day BIGINT, p_month_day BIGINT, p_budget_day BIGINT, p_budget_month BIGINT,
    OUT row_id BIGINT, OUT key_seen BOOLEAN,
    OUT used_tasks BIGINT, OUT used_seconds BIGINT,
    OUT spent_day BIGINT, OUT spent_month BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    key_seen := false;
    PERFORM pg_advisory_xact_lock(hashtext(p_owner));
    -- Each statement below reads with a snapshot taken after the lock: what the
    -- owner's previous admission committed is seen.
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM tasks WHERE owner = p_owner AND idempotency_key = p_key
    ) THEN
        key_seen := true;
        RETURN;
    END IF;
    IF p_tasks_per_day IS NOT NULL OR p_seconds_per_day IS NOT NULL THEN
        SELECT COUNT(*), CAST(COALESCE(SUM((CASE WHEN video_seconds BETWEEN 0 AND 3600 THEN video_seconds ELSE 3600 END)), 0) AS BIGINT)
        INTO used_tasks, used_seconds
        FROM tasks
        WHERE owner = p_owner AND created_ms >= p_day_start
            AND state IN ('submitting', 'submitted', 'completed', 'unknown_outcome');
        IF used_tasks::NUMERIC + 1 > p_tasks_per_day
            OR (p_video_seconds > 0
                AND used_seconds::NUMERIC + p_video_seconds > p_seconds_per_day) THEN
            RETURN;
        END IF;
    END IF;
    IF p_budget_day IS NOT NULL OR p_budget_month IS NOT NULL THEN
        SELECT CAST(COALESCE(SUM(CASE WHEN day = p_day THEN micros ELSE 0 END), 0) AS BIGINT), CAST(COALESCE(SUM(micros), 0) AS BIGINT)
        INTO spent_day, spent_month
        FROM spend
        WHERE owner = p_owner AND day >= p_month_day;
        IF spent_day::NUMERIC + COALESCE(p_cost, 0) > p_budget_day
            OR spent_month::NUMERIC + COALESCE(p_cost, 0) > p_budget_month THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, idempotency_key,
        video_seconds, state, provider, created_ms, updated_ms, callback_url, keep_days,
        cost_estimate, price_params)
    VALUES (p_owner, p_endpoint, p_model, p_kind, p_fingerprint, p_key,
        p_video_seconds, 'submitting', p_provider, p_now, p_now, p_callback_url,
        p_keep_days, p_cost, p_price_params)
    ON CONFLICT (owner, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id INTO row_id;
    key_seen := row_id IS NULL;
END
$$;

-- The admissions of a batch (a JSON array of mediagate_admit's arguments, named
-- without their `p_`, each with its position `n`), in order, in one transaction:
-- an admission sees the rows of those before it. The owners' locks are taken first,
-- in one order every batch follows, so that two replicas' batches never deadlock.
CREATE FUNCTION mediagate_admit_batch(p JSONB)
RETURNS TABLE (n INT, admitted BIGINT, seen BOOLEAN, used_count BIGINT, used_secs BIGINT,
    day_micros BIGINT, month_micros BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    h INT;
    e RECORD;
    a RECORD;
BEGIN
    FOR h IN SELECT DISTINCT hashtext(x->>'owner') FROM jsonb_array_elements(p) x ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(h);
    END LOOP;
    FOR e IN SELECT * FROM jsonb_to_recordset(p) AS r(n INT, owner TEXT, endpoint TEXT,
        model TEXT, kind TEXT, fingerprint TEXT, key TEXT, video_seconds BIGINT,
        now BIGINT, provider TEXT, callback_url TEXT, keep_days BIGINT, cost BIGINT,
        price_params TEXT, day_start BIGINT, tasks_per_day BIGINT,
        seconds_per_day BIGINT, day BIGINT, month_day BIGINT, budget_day BIGINT,
        budget_month BIGINT)
    LOOP
        SELECT * INTO a FROM mediagate_admit(e.owner, e.endpoint, e.model, e.kind,
            e.fingerprint, e.key, e.video_seconds, e.now, e.provider, e.callback_url,
            e.keep_days, e.cost, e.price_params, e.day_start, e.tasks_per_day,
            e.seconds_per_day, e.day, e.month_day, e.budget_day, e.budget_month);
        n := e.n;
        admitted := a.row_id;
        seen := a.key_seen;
        used_count := a.used_tasks;
        used_secs := a.used_seconds;
        day_micros := a.spent_day;
        month_micros := a.spent_month;
        RETURN NEXT;
    END LOOP;
END
$$;
