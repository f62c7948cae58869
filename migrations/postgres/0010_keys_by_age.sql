-- The sweep forgets idempotency keys past their time (issue #34). Through the index of
-- keys (`tasks_idempotency`) it read every row that still holds one, each looked up in
-- the table: all the keyed submits of the last `idempotency_ttl_hours`, at every sweep
-- and on the writer. Here only the keys to forget are read.
CREATE INDEX tasks_keys_by_age ON tasks (created_ms) WHERE idempotency_key IS NOT NULL;
