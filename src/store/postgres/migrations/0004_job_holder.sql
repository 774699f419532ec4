-- The node running a periodic job's current run (`nodes.id`), NULL once the run is over: a run
-- whose node lost its lease (cut off from the database, or dead) is taken over by another node
-- (`domain::jobs`).
ALTER TABLE jobs ADD COLUMN holder bigint;
