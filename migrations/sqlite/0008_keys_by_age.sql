-- The sweep forgets idempotency keys past their time (issue #34): without an index of
-- the rows that hold a key by age, every sweep read every row of the ledger, on the
-- writer (other writes waited for it). Rows without a key are not in it.
CREATE INDEX tasks_keys_by_age ON tasks (created_ms) WHERE idempotency_key IS NOT NULL;
