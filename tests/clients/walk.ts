// A walk through the data API with the TypeScript client that @hey-api/openapi-ts generates
// from the server's document (`tests/clients/run.py` generates it into `./client`, compiles
// this with `tsc --strict` and runs it):
//
//     node walk.js BASE_URL SLUG SANDBOX_KEY
//
// The same walk as walk.py: three creates, a read, a list, a search, a poll from before the
// first create following `next_cursor` until `poll_cursor`, a replace, a delete, the typed
// error of reading the deleted record, a batch of three creates and the typed error of a
// batch with a bad record. Every answer has the generated type of its status. The server
// must hold no poll back (`[poll] hold_back = "0s"`).

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

import {
  createRecord,
  createRecordBatch,
  deleteRecord,
  getRecord,
  listRecords,
  pollRecords,
  replaceRecord,
  searchRecords,
  type Accepted,
  type BatchAccepted,
  type BatchRecord,
  type PollPage,
  type Record as StoredRecord,
  type RecordPage,
  type RecordRefusal,
} from "./client";
import { client } from "./client/client.gen";

/** What every generated call resolves to: the body of a documented success or error. */
type Result<T, E> = ({ data: T; error: undefined } | { data: undefined; error: E }) & {
  response: Response;
};

/** The success body of `call`, which must answer `status`. */
async function success<T, E>(call: Promise<Result<T, E>>, status: number): Promise<T> {
  const { data, error, response } = await call;
  assert.equal(response.status, status, JSON.stringify(error));
  assert.ok(data !== undefined);
  return data;
}

async function main(): Promise<void> {
  const [baseUrl, slug, key] = process.argv.slice(2);
  assert.ok(baseUrl && slug && key, "usage: node walk.js BASE_URL SLUG SANDBOX_KEY");
  client.setConfig({ baseUrl, auth: key });
  const path = { slug };
  const marker = `walk-${randomUUID().slice(0, 12)}`;
  // A second back: `since` counts from this machine's clock, the server stamps with its own.
  const since = new Date(Date.now() - 1000).toISOString();

  // Create: durable before the 202, readable at once.
  const payloads = [0, 1, 2].map((n) => ({ email: `ada${n}@example.com`, marker, n }));
  const ids: string[] = [];
  for (const body of payloads) {
    const accepted: Accepted = await success(createRecord({ path, body }), 202);
    assert.equal(accepted.status, "accepted");
    ids.push(accepted.id);
  }

  // Get one.
  const record: StoredRecord = await success(
    getRecord({ path: { slug, record_id: ids[0] } }),
    200,
  );
  assert.equal(record.id, ids[0]);
  assert.deepEqual(record.payload, payloads[0]);

  // List, newest first, two a page: the second page ends the listing.
  const listed: string[] = [];
  let cursor: string | undefined;
  do {
    const page: RecordPage = await success(
      listRecords({ path, query: { limit: 2, cursor } }),
      200,
    );
    listed.push(...page.data.map((r) => r.id));
    cursor = page.pagination.next_cursor;
  } while (cursor !== undefined);
  assert.deepEqual(listed, [...ids].reverse());

  // Search: exact at once (the unindexed tail is searched too: docs/src/search-and-poll.md).
  let found: RecordPage = await success(searchRecords({ path, query: { q: marker } }), 200);
  assert.deepEqual(
    found.data.map((r) => r.id),
    [...ids].reverse(),
  );

  // Poll, oldest first, one a page: `next_cursor` while a backlog remains, then `poll_cursor`.
  const polled: string[] = [];
  let poll: PollPage = await success(pollRecords({ path, query: { since, limit: 1 } }), 200);
  for (;;) {
    polled.push(...poll.data.map((r) => r.id));
    if (poll.next_cursor === undefined) break;
    poll = await success(
      pollRecords({ path, query: { cursor: poll.next_cursor, limit: 1 } }),
      200,
    );
  }
  assert.deepEqual(polled, ids);
  assert.ok(poll.poll_cursor !== undefined);
  const caughtUp: PollPage = await success(
    pollRecords({ path, query: { cursor: poll.poll_cursor } }),
    200,
  );
  assert.deepEqual(caughtUp.data, []);
  assert.ok(caughtUp.poll_cursor !== undefined);

  // Replace: the payload changes, the id and created_at stay; search sees the new text.
  const replaced = { email: "grace@example.com", n: 0 };
  await success(replaceRecord({ path: { slug, record_id: ids[0] }, body: replaced }), 202);
  const afterReplace: StoredRecord = await success(
    getRecord({ path: { slug, record_id: ids[0] } }),
    200,
  );
  assert.deepEqual(afterReplace.payload, replaced);
  assert.equal(afterReplace.created_at, record.created_at);
  found = await success(searchRecords({ path, query: { q: marker } }), 200);
  assert.deepEqual(
    found.data.map((r) => r.id),
    [ids[2], ids[1]],
  );

  // Delete, then the error model: 404 `record_not_found`.
  await success(deleteRecord({ path: { slug, record_id: ids[1] } }), 202);
  const { data, error, response } = await getRecord({ path: { slug, record_id: ids[1] } });
  assert.equal(response.status, 404);
  assert.equal(data, undefined);
  assert.ok(error !== undefined);
  assert.equal(error.error.code, "record_not_found");
  assert.match(error.error.request_id, /^req_/);

  // A batch: one commit, one entry per record in the order sent, one created_at for all,
  // ids ascending in that order (so search, newest first, shows them reversed).
  const batchMarker = `${marker}-batch`;
  const batch = [0, 1, 2].map((n) => ({ email: `grace${n}@example.com`, marker: batchMarker, n }));
  const acceptedBatch: BatchAccepted = await success(
    createRecordBatch({ path, body: batch }),
    202,
  );
  const entries: BatchRecord[] = acceptedBatch.data;
  assert.deepEqual(
    entries.map((entry) => entry.index),
    [0, 1, 2],
  );
  const batchIds = entries.map((entry) => entry.id);
  assert.deepEqual(batchIds, [...batchIds].sort());
  assert.equal(new Set(batchIds).size, 3);
  assert.equal(new Set(entries.map((entry) => entry.created_at)).size, 1);
  for (const [n, entry] of entries.entries()) {
    const stored: StoredRecord = await success(
      getRecord({ path: { slug, record_id: entry.id } }),
      200,
    );
    assert.deepEqual(stored.payload, batch[n]);
    assert.equal(stored.created_at, entry.created_at);
  }
  found = await success(searchRecords({ path, query: { q: batchMarker } }), 200);
  assert.deepEqual(
    found.data.map((r) => r.id),
    [...batchIds].reverse(),
  );

  // A batch with a bad record stores nothing; the error names the record by its index.
  const refusedMarker = `${marker}-refused`;
  const refused = await createRecordBatch({
    path,
    body: [{ email: "ada@example.com", marker: refusedMarker }, { marker: refusedMarker }],
  });
  assert.equal(refused.response.status, 400);
  assert.equal(refused.data, undefined);
  assert.ok(refused.error !== undefined);
  assert.equal(refused.error.error.code, "batch_invalid");
  const refusals: RecordRefusal[] = refused.error.error.records ?? [];
  assert.deepEqual(
    refusals.map((r) => [r.index, r.code]),
    [[1, "missing_required_field"]],
  );
  found = await success(searchRecords({ path, query: { q: refusedMarker } }), 200);
  assert.deepEqual(found.data, []);
  console.log(
    `typescript walk: ${ids.length} records created, read, listed, searched, polled, ` +
      `replaced, deleted; the error typed; ${batchIds.length} created in a batch, ` +
      "a refused batch's error typed",
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
