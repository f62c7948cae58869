-- The slot of a transaction's additions to `spend` (0015): its transaction id modulo
-- 16 instead of its connection's backend pid. Connections opened together have
-- consecutive pids and distinct slots, but as a pool replaces its connections and
-- replicas' connections interleave, two come to share a slot, and then wait on one
-- row's lock for each other's commits for as long as both live (15-20 % of the
-- additions a second in pgbench: BENCHMARKS.md). Transactions under way at once have
-- nearly consecutive ids, so they seldom share a slot, and then for one transaction.
-- Still one slot per transaction: a batch locks one row per owner and day, in owner
-- order.
CREATE OR REPLACE FUNCTION mediagate_spend_slot() RETURNS INT LANGUAGE sql STABLE AS $$
    SELECT (txid_current() % 16)::int
$$;
