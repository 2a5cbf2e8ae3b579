-- Grants of head office's sink database (hq sink).
--
-- Three roles, made once by a superuser (passwords set there, kept in files):
--   CREATE ROLE rxedge_owner  LOGIN PASSWORD '…';  -- owns the schema: --migrate-only
--   CREATE ROLE rxedge_sink   LOGIN PASSWORD '…';  -- the service: appends rows, moves positions
--   CREATE ROLE rxedge_report LOGIN PASSWORD '…';  -- hq report: reads the views
--   CREATE DATABASE rxedge OWNER rxedge_owner;
-- Then, as rxedge_owner: hq sink --migrate-only, and this file:
--   psql "postgres://rxedge_owner@HOST/rxedge" -f sink-grants.sql
-- Run it again after a migration that adds tables or views (0004 made
-- the views anew, 0005 added verification's tables: run it after
-- upgrading to them).
--
-- The sink's user can insert rows and read them, and move its positions;
-- it cannot update or delete a movement, a repeat, a conflict or a reject,
-- nor change the schema. The report user reads the views only.

DO $$
BEGIN
	EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
	EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO rxedge_sink', current_database());
	EXECUTE format('GRANT CONNECT ON DATABASE %I TO rxedge_report', current_database());
END $$;

REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO rxedge_sink, rxedge_report;

GRANT SELECT ON sink_schema TO rxedge_sink;
GRANT SELECT, INSERT ON movements, movement_repeats, movement_conflicts, sink_rejects TO rxedge_sink;
GRANT SELECT, INSERT, UPDATE ON sink_positions TO rxedge_sink;
-- hq run's verification keeps its state and findings next to the
-- positions (0005): it replaces its state, and closes findings.
GRANT SELECT, INSERT, UPDATE ON verify_state, verify_findings TO rxedge_sink;
GRANT USAGE ON SEQUENCE verify_findings_id_seq TO rxedge_sink;
GRANT SELECT ON verify_findings TO rxedge_report;

GRANT SELECT ON controlled_balances, perpetual_inventory, schedule_ii_movements,
	prescription_movements, movement_signs, ndc_unit_conflicts, count_variances,
	schedule_ii_reconciliation, theft_loss_movements TO rxedge_report;
