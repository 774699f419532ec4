/**
 * The TypeScript client of an endpoint with a JSON Schema has a typed payload
 * (`tests/clients/run.py` generates it from the endpoint's own document, compiles this with
 * tsc --strict and runs it):
 *
 *     node typed.js BASE_URL SLUG SANDBOX_KEY
 *
 * `WritePayload` and `PayloadItem` (from the schema's `$defs`) have the schema's properties:
 * the compile checks their use, and a string property assigned to a `number` must be an error
 * (an unused `@ts-expect-error` is one itself), so the payload is not `unknown` or `any`. Then
 * it creates a record with them and reads it back as them.
 */

import assert from "node:assert/strict";

import { createRecord, getRecord, type PayloadItem, type WritePayload } from "./client";
import { client } from "./client/client.gen";

async function main(): Promise<void> {
  const [baseUrl, slug, key] = process.argv.slice(2);
  assert.ok(baseUrl && slug && key, "usage: node typed.js BASE_URL SLUG SANDBOX_KEY");
  client.setConfig({ baseUrl, auth: key });
  const item: PayloadItem = { sku: "ABC-1", quantity: 2 };
  const body: WritePayload = {
    email: "grace@example.com",
    customer: { name: "Grace", vip: false },
    items: [item],
  };
  const created = await createRecord({ body });
  assert.equal(created.response.status, 202, JSON.stringify(created.error));
  assert.ok(created.data !== undefined);

  const read = await getRecord({ path: { record_id: created.data.id } });
  assert.equal(read.response.status, 200, JSON.stringify(read.error));
  assert.ok(read.data !== undefined);
  const name: string = read.data.payload.customer.name;
  // @ts-expect-error: `customer.name` is a string.
  const _wrong: number = read.data.payload.customer.name;
  assert.equal(name, "Grace");
  assert.deepEqual(read.data.payload.items?.map((i) => i.sku), ["ABC-1"]);
  assert.deepEqual(read.data.payload, body);
  console.log(`typed payload: ${JSON.stringify(read.data.payload)}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
