-- Head office's incremental verification (hq run's verify job; package
-- headoffice/service): these tables are verification's, kept in the
-- sink's database next to sink_positions and migrated with it.
--
-- verify_state holds each verification's state (headoffice/audit's
-- opaque, versioned, self-checking document), one row per state,
-- replaced whole in the transaction that records the pass's findings.
CREATE TABLE verify_state (
	name     text PRIMARY KEY,
	state    bytea NOT NULL,
	passes   bigint NOT NULL DEFAULT 0,
	saved_at timestamptz NOT NULL DEFAULT now()
);

-- verify_findings: one row per finding, by store, log, archive stream,
-- kind, sequences and checkpoint sizes; first_seen and last_seen are the
-- passes that found it first and last, closed_at the pass that no longer
-- found it. An open finding is found again, never inserted twice. The
-- views join on store_id (and log).
CREATE TABLE verify_findings (
	id         bigserial PRIMARY KEY,
	store_id   text NOT NULL,
	log        text NOT NULL DEFAULT '',
	stream     text NOT NULL DEFAULT '',
	kind       text NOT NULL,
	seq_from   bigint NOT NULL DEFAULT 0,
	seq_to     bigint NOT NULL DEFAULT 0,
	sizes      bigint[] NOT NULL DEFAULT '{}',
	records    bigint NOT NULL DEFAULT 0,
	detail     text NOT NULL DEFAULT '',
	first_seen timestamptz NOT NULL,
	last_seen  timestamptz NOT NULL,
	closed_at  timestamptz
);
CREATE UNIQUE INDEX verify_findings_open ON verify_findings
	(store_id, log, stream, kind, seq_from, seq_to, sizes) WHERE closed_at IS NULL;
CREATE INDEX verify_findings_store ON verify_findings (store_id, last_seen DESC);
