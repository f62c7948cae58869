-- The slot of a transaction's additions to `spend` (0015): its transaction id modulo
-- 16 instead of its connection's backend pid. Eight pool connections fall into 16
-- slots two to one more often than not, and the pair then waited on one row's lock
-- for each other's commits for as long as the pool lived; transactions under way at
-- once have nearly consecutive ids, so they seldom share a slot, and when they do it
-- is for one transaction. Still one slot per transaction: a batch locks one row per
-- owner and day, in owner order.
CREATE OR REPLACE FUNCTION mediagate_spend_slot() RETURNS INT LANGUAGE sql STABLE AS $$
    SELECT (txid_current() % 16)::int
$$;
