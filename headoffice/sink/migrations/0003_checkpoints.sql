-- The stores' checkpoints (central/ledger) are in the archives too: the
-- sink passes over them (they are not movements) and counts them, so that
-- an archive's position is still the sum of what it counted.
ALTER TABLE sink_positions ADD COLUMN checkpoints bigint NOT NULL DEFAULT 0;
