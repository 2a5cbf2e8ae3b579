-- The sink's tables. Every archive message central holds ends in exactly
-- one of movements, movement_repeats, movement_conflicts or sink_rejects,
-- found by (archive_stream, archive_seq); sink_positions says, per archive
-- stream, the highest sequence whose message is in them, written in the
-- same transaction as those rows.

CREATE TABLE sink_positions (
	archive_stream text PRIMARY KEY,
	last_seq       bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
	rows           bigint NOT NULL DEFAULT 0,
	repeats        bigint NOT NULL DEFAULT 0,
	conflicts      bigint NOT NULL DEFAULT 0,
	rejects        bigint NOT NULL DEFAULT 0,
	updated_at     timestamptz NOT NULL DEFAULT now()
);

-- One row per (store, key): the first archived copy of a movement.
-- Partitioned by hash of the store, so each partition's indexes stay a
-- sixteenth of the whole at the sizes of a chain's retention.
CREATE TABLE movements (
	store_id       text NOT NULL,
	key            char(32) NOT NULL CHECK (key ~ '^[0-9a-f]{32}$'),
	seq            bigint NOT NULL,
	digest         char(64) NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
	movement_id    text NOT NULL,
	type           text NOT NULL,
	ndc            text NOT NULL,
	quantity       numeric(24,6) NOT NULL CHECK (quantity > 0),
	unit           text NOT NULL,
	occurred_at    timestamptz NOT NULL,
	schedule       text,
	lot            text,
	expires        text,
	rx_ref         text,
	dea_form_222   text,
	note           text,
	payload        text NOT NULL,
	archive_stream text NOT NULL,
	archive_seq    bigint NOT NULL,
	enqueued_at    timestamptz,
	archived_at    timestamptz NOT NULL,
	sunk_at        timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (store_id, key)
) PARTITION BY HASH (store_id);

CREATE TABLE movements_p00 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 0);
CREATE TABLE movements_p01 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 1);
CREATE TABLE movements_p02 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 2);
CREATE TABLE movements_p03 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 3);
CREATE TABLE movements_p04 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 4);
CREATE TABLE movements_p05 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 5);
CREATE TABLE movements_p06 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 6);
CREATE TABLE movements_p07 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 7);
CREATE TABLE movements_p08 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 8);
CREATE TABLE movements_p09 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 9);
CREATE TABLE movements_p10 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 10);
CREATE TABLE movements_p11 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 11);
CREATE TABLE movements_p12 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 12);
CREATE TABLE movements_p13 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 13);
CREATE TABLE movements_p14 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 14);
CREATE TABLE movements_p15 PARTITION OF movements FOR VALUES WITH (MODULUS 16, REMAINDER 15);

-- Verification walks a stream's rows in archive order.
CREATE INDEX movements_archive ON movements (archive_stream, archive_seq);
-- The perpetual inventory reads a store's NDC in time order.
CREATE INDEX movements_store_ndc ON movements (store_id, ndc, occurred_at, seq);
-- One prescription's movements.
CREATE INDEX movements_rx_ref ON movements (rx_ref) WHERE rx_ref IS NOT NULL;

-- A movement archived again with the same content (an agent's resend past
-- central's dedupe horizon, or a migration's copy): harmless, kept once in
-- movements and recorded here.
CREATE TABLE movement_repeats (
	archive_stream text NOT NULL,
	archive_seq    bigint NOT NULL,
	store_id       text NOT NULL,
	key            char(32) NOT NULL,
	seq            bigint NOT NULL,
	digest         char(64) NOT NULL,
	archived_at    timestamptz NOT NULL,
	found_at       timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (archive_stream, archive_seq)
);
CREATE INDEX movement_repeats_store ON movement_repeats (store_id, key);

-- A key archived with another content than the row movements holds: never
-- written over it; kept here for head office to resolve.
CREATE TABLE movement_conflicts (
	archive_stream text NOT NULL,
	archive_seq    bigint NOT NULL,
	store_id       text NOT NULL,
	key            char(32) NOT NULL,
	seq            bigint NOT NULL,
	digest         char(64) NOT NULL,
	kept_digest    char(64) NOT NULL,
	payload        text NOT NULL,
	enqueued_at    timestamptz,
	archived_at    timestamptz NOT NULL,
	found_at       timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (archive_stream, archive_seq)
);
CREATE INDEX movement_conflicts_store ON movement_conflicts (store_id, key);

-- An archive message that is not a well-formed movement (headers missing,
-- a digest or key that does not match the payload, a field that does not
-- parse). The reason names the header or field, never its value.
CREATE TABLE sink_rejects (
	archive_stream text NOT NULL,
	archive_seq    bigint NOT NULL,
	store_id       text NOT NULL,
	reason         text NOT NULL,
	archived_at    timestamptz NOT NULL,
	found_at       timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (archive_stream, archive_seq)
);
CREATE INDEX sink_rejects_store ON sink_rejects (store_id);
