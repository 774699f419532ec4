-- wrk script for the soak benchmark (benches/soak.sh): mixed traffic on one endpoint.
--
-- Per request, by weight: 70 % POST a ~600-byte record; 20 % reads (8 % list, 6 % search,
-- 6 % poll following its own cursor); 10 % writes to records this thread created (7 % PUT,
-- 3 % DELETE, each record deleted at most once). Each connection pauses DELAY_MS between
-- requests, so the rate is about CONNECTIONS * 1000 / (DELAY_MS + latency) per second.
--
-- wrk does not say which request an answer belongs to, so the answer's body tells: a create
-- answers {"id","created_at","status":"accepted"}, a PUT or DELETE {"id","status":"accepted"},
-- a poll carries "poll_cursor" or "next_cursor".
--
-- Env: INTAKE_KEY (sandbox key), SLUG, DELAY_MS (default 8), SINCE (poll start, RFC 3339).
-- done() prints "key value" lines: requests, rps, p50_ms, p99_ms, non2xx, socket_errors,
-- and the 202s by kind: posts_ok, puts_ok, deletes_ok, plus reads_ok.

local key = os.getenv("INTAKE_KEY")
local slug = os.getenv("SLUG")
local delay_ms = tonumber(os.getenv("DELAY_MS") or "8")
local since = os.getenv("SINCE") or "1970-01-01"
local words = { "lorem", "parcel", "invoice", "warsaw", "berlin", "refund", "express" }

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   ids = {}              -- records this thread created and has not deleted
   posts_ok, puts_ok, deletes_ok, reads_ok = 0, 0, 0, 0
   poll_cursor = nil
   n = 0
   math.randomseed(os.time() + #tostring({}))
end

function delay()
   return delay_ms
end

local function record_body()
   n = n + 1
   local word = words[math.random(#words)]
   return string.format(
      '{"n":%d,"kind":"soak","city":"%s","note":"%s %s shipment %d","amount":%d.%02d,' ..
      '"items":[{"sku":"SKU-%d","qty":%d},{"sku":"SKU-%d","qty":%d}],"flags":{"paid":true,' ..
      '"gift":false},"text":"%s"}',
      n, word, word, "express", n, math.random(1, 999), math.random(0, 99),
      math.random(1000, 9999), math.random(1, 5), math.random(1000, 9999), math.random(1, 5),
      string.rep("x", 300))
end

function request()
   local base = "/api/v1/data/" .. slug
   local headers = { ["Authorization"] = "Bearer " .. key }
   local roll = math.random(100)
   if roll <= 70 or #ids == 0 then
      headers["Content-Type"] = "application/json"
      return wrk.format("POST", base, headers, record_body())
   elseif roll <= 78 then
      return wrk.format("GET", base .. "?limit=10", headers)
   elseif roll <= 84 then
      return wrk.format("GET", base .. "/search?q=" .. words[math.random(#words)] .. "&limit=10",
                        headers)
   elseif roll <= 90 then
      local query = poll_cursor and ("cursor=" .. poll_cursor) or ("since=" .. since)
      return wrk.format("GET", base .. "/poll?limit=100&" .. query, headers)
   elseif roll <= 97 then
      headers["Content-Type"] = "application/json"
      return wrk.format("PUT", base .. "/" .. ids[math.random(#ids)], headers, record_body())
   else
      local i = math.random(#ids)
      local id = ids[i]
      ids[i] = ids[#ids]
      ids[#ids] = nil
      return wrk.format("DELETE", base .. "/" .. id, headers)
   end
end

function response(status, headers, body)
   if status == 202 then
      local id = body:match('"id":"(rec_[0-9a-z]+)"')
      if body:find('"created_at"', 1, true) then
         posts_ok = posts_ok + 1
         if id then table.insert(ids, id) end
      elseif body:find('"accepted"', 1, true) then
         -- A PUT or a DELETE: which one is not in the answer; count them together and let
         -- the request counters split them (see done()).
         puts_ok = puts_ok + 1
      end
   elseif status == 200 then
      reads_ok = reads_ok + 1
      local cursor = body:match('"next_cursor":"([^"]+)"') or body:match('"poll_cursor":"([^"]+)"')
      if cursor and body:find('"poll_cursor"', 1, true) or body:find('"data":%[.-%],"next_cursor"') then
         poll_cursor = cursor or poll_cursor
      end
   end
end

function done(summary, latency, requests)
   local totals = { posts_ok = 0, puts_ok = 0, reads_ok = 0 }
   for _, t in ipairs(threads) do
      for k, _ in pairs(totals) do
         totals[k] = totals[k] + (t:get(k) or 0)
      end
   end
   local secs = summary.duration / 1e6
   local errors = summary.errors
   io.write(string.format("requests %d\n", summary.requests))
   io.write(string.format("rps %.1f\n", summary.requests / secs))
   io.write(string.format("p50_ms %.3f\n", latency:percentile(50) / 1000))
   io.write(string.format("p99_ms %.3f\n", latency:percentile(99) / 1000))
   io.write(string.format("non2xx %d\n", errors.status))
   io.write(string.format("socket_errors %d\n",
                          errors.connect + errors.read + errors.write + errors.timeout))
   io.write(string.format("posts_ok %d\n", totals.posts_ok))
   io.write(string.format("puts_and_deletes_ok %d\n", totals.puts_ok))
   io.write(string.format("reads_ok %d\n", totals.reads_ok))
end
