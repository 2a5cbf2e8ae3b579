-- An archive stream central's administrator deleted and created again
-- starts its sequences again at 1, and the sink's tables are append-only
-- for the sink (configs/postgres/sink-grants.sql): the rows of each
-- stream created again are recorded under a name of their own,
-- "<stream>@<its creation time>", with a position row of that name.
--
-- archive_created is the creation time of the stream a position row is
-- of (NULL for one stored before this migration: the next run takes the
-- stream's). On a stream's own row, current_as names the position row
-- its rows are now recorded under (NULL: its own), and recreated counts
-- the times the sink found the stream created again.
ALTER TABLE sink_positions
	ADD COLUMN archive_created timestamptz,
	ADD COLUMN current_as text,
	ADD COLUMN recreated bigint NOT NULL DEFAULT 0;
