-- The views an inspection asks for.

-- The sign each movement type gives its quantity in the perpetual
-- inventory. The movement model has only positive quantities; a return is
-- a return to stock, an adjustment a count found above the book. A head
-- office whose stores record otherwise changes a sign here (the views read
-- this table).
CREATE TABLE movement_signs (
	type text PRIMARY KEY,
	sign smallint NOT NULL CHECK (sign IN (-1, 1))
);
INSERT INTO movement_signs (type, sign) VALUES
	('receive', 1), ('return', 1), ('transfer_in', 1), ('adjust', 1),
	('dispense', -1), ('waste', -1), ('transfer_out', -1);

-- Every controlled-substance movement with the running balance of its
-- store's NDC (in its unit) after it, in the order the movements occurred
-- (ties in store sequence order).
CREATE VIEW perpetual_inventory AS
SELECT m.store_id, m.ndc, m.unit, m.schedule, m.occurred_at, m.seq, m.key,
       m.type, m.quantity, s.sign * m.quantity AS change,
       sum(s.sign * m.quantity) OVER (
           PARTITION BY m.store_id, m.ndc, m.unit
           ORDER BY m.occurred_at, m.seq
           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS balance,
       m.lot, m.dea_form_222
FROM movements m JOIN movement_signs s ON s.type = m.type
WHERE m.schedule IS NOT NULL;

-- The balance of each controlled NDC of each store now, with the totals it
-- is made of.
CREATE VIEW controlled_balances AS
SELECT m.store_id, m.ndc, m.unit, max(m.schedule) AS schedule,
       sum(s.sign * m.quantity) AS balance,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'receive'), 0)      AS received,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'dispense'), 0)     AS dispensed,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'return'), 0)       AS returned,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'waste'), 0)        AS wasted,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'adjust'), 0)       AS adjusted,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'transfer_in'), 0)  AS transferred_in,
       coalesce(sum(m.quantity) FILTER (WHERE m.type = 'transfer_out'), 0) AS transferred_out,
       count(*) AS movements,
       max(m.occurred_at) AS last_movement_at
FROM movements m JOIN movement_signs s ON s.type = m.type
WHERE m.schedule IS NOT NULL
GROUP BY m.store_id, m.ndc, m.unit;

-- Every Schedule II movement (CII, CIIN) with its DEA Form 222 / CSOS
-- order number where the store gave one.
CREATE VIEW schedule_ii_movements AS
SELECT store_id, occurred_at, seq, key, type, ndc, quantity, unit, schedule,
       dea_form_222, lot, rx_ref, movement_id
FROM movements
WHERE schedule IN ('CII', 'CIIN');
CREATE INDEX movements_schedule_ii ON movements (store_id, occurred_at) WHERE schedule IN ('CII', 'CIIN');

-- The movements that name a prescription reference.
CREATE VIEW prescription_movements AS
SELECT rx_ref, store_id, occurred_at, seq, key, type, ndc, quantity, unit, schedule,
       dea_form_222, lot, movement_id
FROM movements
WHERE rx_ref IS NOT NULL;
