-- Batched updates of tasks, row by row (issue #34). A batch of updates written as one
-- `UPDATE tasks … FROM unnest(…)` (or `jsonb_array_elements`) is a join, and its plan
-- is kept by the connection once the statement has run a few times: made while the
-- table was small (a new ledger), it scans the whole table for every batch, and keeps
-- doing so as the table grows, until autovacuum's next ANALYZE. Under load that
-- stalled every submit within the first minute of a new ledger. Here each row is its
-- own `UPDATE … WHERE id = …`, whose plan is the primary key's index at any size.

-- What the upstream created (`record::SET_CREATED`), for each position of the arrays.
CREATE FUNCTION mediagate_created_batch(
    p_id BIGINT[], p_provider TEXT[], p_upstream_id TEXT[], p_task_id TEXT[],
    p_status TEXT[], p_answer_status BIGINT[], p_answer_body TEXT[], p_now BIGINT[],
    p_poll_interval_ms BIGINT[])
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_id, 1), 0) LOOP
        UPDATE tasks SET state = 'submitted', provider = p_provider[i],
            upstream_id = p_upstream_id[i], task_id = p_task_id[i], status = p_status[i],
            answer_status = p_answer_status[i], answer_body = p_answer_body[i],
            updated_ms = p_now[i], next_poll_ms = p_now[i] + p_poll_interval_ms[i],
            poll_interval_ms = p_poll_interval_ms[i]
        WHERE id = p_id[i] AND finished_ms IS NULL;
    END LOOP;
END
$$;

-- The tracker's write-back (`record::SET_POLLED_SQLITE`'s list: `[id, status, next
-- poll, interval, answered]` per task) of the leases `p_owner` holds: the ids of the
-- rows changed, one row each (so the statement's row count is the rows changed).
CREATE FUNCTION mediagate_polled(p_owner TEXT, p JSONB)
RETURNS SETOF BIGINT LANGUAGE plpgsql AS $$
DECLARE
    e JSONB;
    changed BIGINT;
BEGIN
    FOR e IN SELECT value FROM jsonb_array_elements(p) LOOP
        UPDATE tasks SET status = e ->> 1, next_poll_ms = (e ->> 2)::BIGINT,
            poll_interval_ms = (e ->> 3)::BIGINT, lease_owner = NULL,
            lease_until_ms = NULL, updated_ms = (e ->> 4)::BIGINT
        WHERE id = (e ->> 0)::BIGINT AND lease_owner = p_owner
        RETURNING id INTO changed;
        IF FOUND THEN
            RETURN NEXT changed;
        END IF;
    END LOOP;
END
$$;
