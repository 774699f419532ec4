-- Each rate-limited webhook subscription's next start (GCRA's theoretical arrival time, in
-- microseconds of the nodes' clocks), shared so that the limit holds across the cluster.
CREATE TABLE subscription_pace (
    partition bigint NOT NULL,
    subscription integer NOT NULL,
    next_start bigint NOT NULL,
    PRIMARY KEY (partition, subscription)
);
