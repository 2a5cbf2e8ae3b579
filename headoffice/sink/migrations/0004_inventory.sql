-- Inventory that adds up: one product identity, corrections both ways,
-- physical counts and their variance, the reports inspectors ask for.

-- The canonical NDC (movement.CanonicalNDC, written in Go once; this is
-- its twin for the rows already here, and TestCanonicalNDCInSQL holds the
-- two to the same answers): 11 digits as 5-4-2 with hyphens, a hyphenated
-- 4-4-2, 5-3-2 or 5-4-1 NDC padded in its short group, 11 bare digits
-- read as 5-4-2. NULL for anything else, a bare 10-digit NDC included
-- (ambiguous; no agent ever stored one).
CREATE FUNCTION rx_canonical_ndc(ndc text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE
	WHEN ndc ~ '^[0-9]{11}$' THEN substr(ndc, 1, 5) || '-' || substr(ndc, 6, 4) || '-' || substr(ndc, 10, 2)
	WHEN ndc ~ '^[0-9]{5}-[0-9]{4}-[0-9]{2}$' THEN ndc
	WHEN ndc ~ '^[0-9]{4}-[0-9]{4}-[0-9]{2}$' THEN '0' || ndc
	WHEN ndc ~ '^[0-9]{5}-[0-9]{3}-[0-9]{2}$' THEN substr(ndc, 1, 6) || '0' || substr(ndc, 7)
	WHEN ndc ~ '^[0-9]{5}-[0-9]{4}-[0-9]$' THEN substr(ndc, 1, 11) || '0' || substr(ndc, 12)
END
$$;

-- The movement's new fields. ndc holds the canonical NDC from here on;
-- ndc_as_sent what the store was sent when it differs. A row archived
-- before keeps its payload and digest for ever (P9): only these columns,
-- which are read from it, change.
ALTER TABLE movements
	ADD COLUMN ndc_as_sent  text,
	ADD COLUMN reason       text,
	ADD COLUMN count_kind   text,
	ADD COLUMN count_method text;
UPDATE movements SET ndc_as_sent = ndc, ndc = rx_canonical_ndc(ndc)
WHERE rx_canonical_ndc(ndc) IS NOT NULL AND ndc <> rx_canonical_ndc(ndc);

-- A count records what is on the shelf, zero included.
ALTER TABLE movements DROP CONSTRAINT movements_quantity_check;
ALTER TABLE movements ADD CONSTRAINT movements_quantity_check
	CHECK (quantity > 0 OR (type = 'count' AND quantity >= 0));

-- Adjustments go both ways; `adjust`, from agents and clients before
-- them, adds as adjust_in does. A count changes nothing in the book: it
-- has no sign, and the views that sum the book leave it out.
INSERT INTO movement_signs (type, sign) VALUES ('adjust_in', 1), ('adjust_out', -1);

DROP VIEW perpetual_inventory, controlled_balances, schedule_ii_movements, prescription_movements;

-- Whether a store's NDC was seen in more than one unit: its balances in
-- each unit are kept apart (their sum would mean nothing) and flagged.
CREATE VIEW ndc_unit_conflicts AS
SELECT m.store_id, m.ndc, m.unit, count(*) AS movements,
       min(m.occurred_at) AS first_at, max(m.occurred_at) AS last_at
FROM movements m
WHERE EXISTS (SELECT 1 FROM movements o WHERE o.store_id = m.store_id AND o.ndc = m.ndc AND o.unit <> m.unit)
GROUP BY m.store_id, m.ndc, m.unit;

-- Every controlled-substance movement but counts with the running balance
-- of its store's NDC (in its unit) after it, in the order the movements
-- occurred (ties in store sequence order).
CREATE VIEW perpetual_inventory AS
SELECT store_id, ndc, unit, schedule, occurred_at, seq, key, type, reason, quantity, change,
       sum(change) OVER (
           PARTITION BY store_id, ndc, unit
           ORDER BY occurred_at, seq
           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS balance,
       mixed_units, lot, dea_form_222, ndc_as_sent
FROM (
	SELECT m.store_id, m.ndc, m.unit, m.schedule, m.occurred_at, m.seq, m.key, m.type, m.reason,
	       m.quantity, s.sign * m.quantity AS change, m.lot, m.dea_form_222, m.ndc_as_sent,
	       min(m.unit) OVER w <> max(m.unit) OVER w AS mixed_units
	FROM movements m LEFT JOIN movement_signs s ON s.type = m.type
	WHERE m.schedule IS NOT NULL
	WINDOW w AS (PARTITION BY m.store_id, m.ndc)
) x
WHERE type <> 'count';

-- The balance of each controlled NDC of each store now, with the totals
-- it is made of.
CREATE VIEW controlled_balances AS
SELECT m.store_id, m.ndc, m.unit, max(m.schedule) AS schedule,
       sum(s.sign * m.quantity) AS balance,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'receive'), 0)                 AS received,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'dispense'), 0)                AS dispensed,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'return'), 0)                  AS returned,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'waste'), 0)                   AS wasted,
       coalesce(sum(m.quantity) FILTER (WHERE m.type IN ('adjust', 'adjust_in')), 0)  AS adjusted_in,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'adjust_out'), 0)              AS adjusted_out,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'transfer_in'), 0)             AS transferred_in,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'transfer_out'), 0)            AS transferred_out,
       count(*) AS movements,
       max(m.occurred_at) AS last_movement_at,
       EXISTS (SELECT 1 FROM movements o WHERE o.store_id = m.store_id AND o.ndc = m.ndc AND o.unit <> m.unit) AS mixed_units
FROM movements m JOIN movement_signs s ON s.type = m.type
WHERE m.schedule IS NOT NULL
GROUP BY m.store_id, m.ndc, m.unit;

-- Every physical count, with the book at its time and what moved since
-- the store's previous count of the NDC (in the same unit): the book
-- balance is every movement before the count (in occurred_at, then
-- sequence order); its variance is the count less the book. The sums
-- since the previous count split out the count corrections (adjustments
-- with reason count_correction, which correct the book, not the shelf)
-- and the thefts and losses, for the reconciliation 16 CCR 1715.65 asks.
CREATE VIEW count_variances AS
WITH c AS (
	SELECT store_id, ndc, unit, schedule, occurred_at, seq, key, quantity, count_kind, count_method,
	       lag(occurred_at) OVER w AS previous_at, lag(seq) OVER w AS previous_seq, lag(quantity) OVER w AS previous_counted
	FROM movements WHERE type = 'count'
	WINDOW w AS (PARTITION BY store_id, ndc, unit ORDER BY occurred_at, seq)
)
SELECT c.store_id, c.ndc, c.unit, c.schedule, c.occurred_at AS counted_at, c.seq, c.key,
       c.count_kind, c.count_method, c.quantity AS counted,
       b.book AS book_balance, c.quantity - b.book AS variance,
       CASE WHEN b.book <> 0 THEN round((c.quantity - b.book) * 100 / b.book, 2) END AS variance_pct,
       c.previous_at AS previous_count_at, c.previous_counted,
       w.received, w.transferred_in, w.returned, w.adjusted_in, w.corrections_in,
       w.dispensed, w.transferred_out, w.wasted, w.adjusted_out, w.corrections_out, w.thefts_losses,
       w.movements AS movements_since
FROM c
CROSS JOIN LATERAL (
	SELECT coalesce(sum(s.sign * m.quantity), 0) AS book
	FROM movements m JOIN movement_signs s ON s.type = m.type
	WHERE m.store_id = c.store_id AND m.ndc = c.ndc AND m.unit = c.unit
	  AND (m.occurred_at, m.seq) < (c.occurred_at, c.seq)
) b
CROSS JOIN LATERAL (
	SELECT coalesce(sum(m.quantity) FILTER (WHERE m.type = 'receive'), 0)                AS received,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'transfer_in'), 0)            AS transferred_in,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'return'), 0)                 AS returned,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type IN ('adjust', 'adjust_in')), 0) AS adjusted_in,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type IN ('adjust', 'adjust_in') AND m.reason = 'count_correction'), 0) AS corrections_in,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'dispense'), 0)               AS dispensed,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'transfer_out'), 0)           AS transferred_out,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'waste'), 0)                  AS wasted,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'adjust_out'), 0)             AS adjusted_out,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'adjust_out' AND m.reason = 'count_correction'), 0) AS corrections_out,
	       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'adjust_out' AND m.reason IN ('theft', 'loss')), 0) AS thefts_losses,
	       count(*) FILTER (WHERE m.type <> 'count') AS movements
	FROM movements m
	WHERE m.store_id = c.store_id AND m.ndc = c.ndc AND m.unit = c.unit
	  AND (m.occurred_at, m.seq) < (c.occurred_at, c.seq)
	  AND (c.previous_at IS NULL OR (m.occurred_at, m.seq) > (c.previous_at, c.previous_seq))
) w;

-- The quarterly Schedule II reconciliation of 16 CCR 1715.65, one row per
-- count: the previous count (none: zero, at the start of the records),
-- what came in and went out since, other than count corrections; what
-- should be on the shelf, the count, and the variance as quantity and
-- percent of what should be there.
CREATE VIEW schedule_ii_reconciliation AS
SELECT store_id, ndc, unit, schedule, count_kind, count_method, counted_at, seq, key,
       previous_count_at, coalesce(previous_counted, 0) AS opening,
       received, transferred_in, returned, adjusted_in - corrections_in AS other_in,
       dispensed, transferred_out, wasted, thefts_losses,
       adjusted_out - corrections_out - thefts_losses AS other_out,
       e.expected, counted, counted - e.expected AS variance,
       CASE WHEN e.expected <> 0 THEN round((counted - e.expected) * 100 / e.expected, 2) END AS variance_pct,
       book_balance, variance AS book_variance
FROM count_variances
CROSS JOIN LATERAL (
	SELECT coalesce(previous_counted, 0) + received + transferred_in + returned + adjusted_in - corrections_in
	       - dispensed - transferred_out - wasted - adjusted_out + corrections_out AS expected
) e
WHERE schedule IN ('CII', 'CIIN');

-- Thefts and losses of controlled substances, for DEA Form 106: the
-- report adds when each notice is due.
CREATE VIEW theft_loss_movements AS
SELECT store_id, occurred_at AS discovered_at, seq, key, reason, ndc, ndc_as_sent, schedule,
       quantity, unit, lot, movement_id
FROM movements
WHERE type = 'adjust_out' AND reason IN ('theft', 'loss') AND schedule IS NOT NULL;

-- Every Schedule II movement (CII, CIIN) with its DEA Form 222 / CSOS
-- order number where the store gave one.
CREATE VIEW schedule_ii_movements AS
SELECT store_id, occurred_at, seq, key, type, reason, ndc, quantity, unit, schedule,
       dea_form_222, lot, rx_ref, movement_id, ndc_as_sent
FROM movements
WHERE schedule IN ('CII', 'CIIN');

-- The movements that name a prescription reference.
CREATE VIEW prescription_movements AS
SELECT rx_ref, store_id, occurred_at, seq, key, type, ndc, quantity, unit, schedule,
       dea_form_222, lot, movement_id, ndc_as_sent
FROM movements
WHERE rx_ref IS NOT NULL;

-- Counts of a store in time order.
CREATE INDEX movements_counts ON movements (store_id, occurred_at) WHERE type = 'count';
