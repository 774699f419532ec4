-- Each owner subscription's health (`SubscriptionHealth`: its last success and failure, its
-- failure streak), kept apart from `owner_webhooks`: the dispatcher notes it after every
-- attempt, and every ingest batch reads `owner_webhooks`, so under SERIALIZABLE a health kept
-- inside the settings made each batch and each result write a read/write conflict that one of
-- them lost. `owner_webhooks.data` keeps the subscriptions without their health from now on.
CREATE TABLE subscription_health (
    partition bigint NOT NULL,
    subscription integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (partition, subscription)
);

-- The settings' JSON never holds the escape `\u0000` (descriptions and URLs refuse control
-- characters), which jsonb refuses; a row that did would keep its settings and start its health
-- afresh rather than stop the migration.
INSERT INTO subscription_health (partition, subscription, data)
SELECT o.partition, (s ->> 'id')::integer, convert_to((s -> 'health')::text, 'UTF8')
FROM (SELECT partition, convert_from(data, 'UTF8') AS settings FROM owner_webhooks
      WHERE strpos(convert_from(data, 'UTF8'), '\u0000') = 0) AS o,
     jsonb_array_elements(o.settings::jsonb -> 'subscriptions') AS s
WHERE s ? 'health';
