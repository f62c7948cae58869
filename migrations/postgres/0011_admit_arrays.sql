-- mediagate_admit_batch over arrays rather than a JSON document (issue #31): the
-- gateway built, wrote and freed a JSON object of twenty fields per admission, and the
-- server parsed it again; arrays are bound as they are, as the plain submit's rows
-- are (`postgres_submits.rs`). The same admissions, in the same order and under the
-- same locks. The JSON function stays for replicas of the previous version during a
-- rolling upgrade.
CREATE FUNCTION mediagate_admit_arrays(
    p_owner TEXT[], p_endpoint TEXT[], p_model TEXT[], p_kind TEXT[],
    p_fingerprint TEXT[], p_key TEXT[], p_video_seconds BIGINT[], p_now BIGINT[],
    p_provider TEXT[], p_callback_url TEXT[], p_keep_days BIGINT[], p_cost BIGINT[],
    p_price_params TEXT[], p_day_start BIGINT[], p_tasks_per_day BIGINT[],
    p_seconds_per_day BIGINT[], p_day BIGINT[], p_month_day BIGINT[],
    p_budget_day BIGINT[], p_budget_month BIGINT[])
RETURNS TABLE (n INT, admitted BIGINT, seen BOOLEAN, used_count BIGINT, used_secs BIGINT,
    day_micros BIGINT, month_micros BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    h INT;
    a RECORD;
BEGIN
    -- The owners' locks first, in the one order every batch follows.
    FOR h IN SELECT DISTINCT hashtext(o) FROM unnest(p_owner) o ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(h);
    END LOOP;
    FOR i IN 1 .. COALESCE(array_length(p_owner, 1), 0) LOOP
        SELECT * INTO a FROM mediagate_admit(p_owner[i], p_endpoint[i], p_model[i],
            p_kind[i], p_fingerprint[i], p_key[i], p_video_seconds[i], p_now[i],
            p_provider[i], p_callback_url[i], p_keep_days[i], p_cost[i],
            p_price_params[i], p_day_start[i], p_tasks_per_day[i], p_seconds_per_day[i],
            p_day[i], p_month_day[i], p_budget_day[i], p_budget_month[i]);
        n := i - 1;
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
