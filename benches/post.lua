-- wrk script for the intake ingest benchmark.
--
-- Every request is a POST of the same ~1 KB JSON record (nested object,
-- strings, numbers, booleans, an array) to PATH_TO_POST (env) or, when that
-- is unset, to the path of the URL given to wrk.
--
-- Env:
--   PATH_TO_POST  path to POST to (default: wrk.path, i.e. the URL's path)
--   INTAKE_KEY    sent as "Authorization: Bearer $INTAKE_KEY" when set
--   BATCH         records per request (default 1): above 1, each request is a batch of that
--                 many copies of the record as NDJSON to PATH_TO_POST + "/batch"
--
-- done() prints machine-readable lines (one "key value" pair per line):
--   requests N / rps X / p50_ms X / p99_ms X / non2xx N / records_per_request N
-- plus socket_errors N (connect + read + write + timeout errors).

local body = [[
{"event":"order.created","source":"web-checkout","schema_version":3,"received_from":"bench","order":{"id":"ord_7f3a9c21e4b8","created_at":"2024-05-14T09:31:27.412Z","currency":"EUR","subtotal":184.5,"tax":35.06,"shipping":4.99,"total":224.55,"paid":true,"coupon":null,"customer":{"id":"cus_51d0e8a7","email":"marta.kowalska@example.com","name":"Marta Kowalska","locale":"pl-PL","marketing_opt_in":false,"address":{"line1":"ul. Marszalkowska 84/92","line2":"lok. 12","city":"Warszawa","postcode":"00-514","country":"PL"}},"items":[{"sku":"TSHIRT-ORG-M-BLU","name":"Organic cotton t-shirt, blue, M","qty":2,"unit_price":24.9},{"sku":"MUG-CER-350-WHT","name":"Ceramic mug 350 ml, white","qty":1,"unit_price":12.5},{"sku":"BOOK-RUST-2ED","name":"The Rust Programming Language, 2nd edition","qty":1,"unit_price":122.2}]},"tags":["checkout","web","eu","returning-customer"],"metrics":{"cart_ms":48213,"render_ms":182.7,"retries":0},"note":"Leave the parcel with the neighbour at flat 11 if nobody answers; ring twice."}
]]
-- drop the trailing newline of the long-bracket string
body = body:gsub("%s+$", "")

local path_to_post = os.getenv("PATH_TO_POST")
local key = os.getenv("INTAKE_KEY")
local batch = tonumber(os.getenv("BATCH") or "1") or 1
local record_bytes = #body
local content_type = "application/json"
if batch > 1 then
   body = string.rep(body .. "\n", batch)
   content_type = "application/x-ndjson"
   path_to_post = (path_to_post or wrk.path) .. "/batch"
end

-- A static request: wrk sends it from C without calling into Lua per request or per
-- response, so the load generator takes as little CPU as possible from the server it
-- shares the machine with. wrk itself counts answers with status >= 400
-- (summary.errors.status).
wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = content_type
if key ~= nil and key ~= "" then
   wrk.headers["Authorization"] = "Bearer " .. key
end
if path_to_post ~= nil and path_to_post ~= "" then
   wrk.path = path_to_post
end

function done(summary, latency, requests)
   local non2xx_total = summary.errors.status
   local secs = summary.duration / 1e6
   local rps = 0
   if secs > 0 then
      rps = summary.requests / secs
   end
   local e = summary.errors
   local socket_errors = e.connect + e.read + e.write + e.timeout
   -- wrk's latency values are in microseconds.
   io.write(string.format("body_bytes %d\n", record_bytes))
   io.write(string.format("records_per_request %d\n", batch))
   io.write(string.format("requests %d\n", summary.requests))
   io.write(string.format("rps %.1f\n", rps))
   io.write(string.format("p50_ms %.3f\n", latency:percentile(50) / 1000))
   io.write(string.format("p99_ms %.3f\n", latency:percentile(99) / 1000))
   io.write(string.format("non2xx %d\n", non2xx_total))
   io.write(string.format("socket_errors %d\n", socket_errors))
end
