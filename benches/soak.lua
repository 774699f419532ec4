-- wrk script for the soak benchmark (benches/soak.sh): mixed traffic on one endpoint.
--
-- Per request, by weight: 70 % POST a ~600-byte record; 20 % reads (8 % list, 6 % search,
-- 6 % poll following its own cursor); 10 % writes to records this thread created less than
-- MAX_AGE seconds ago (7 % PUT, 3 % DELETE, each record deleted at most once), so that none
-- of them has been purged by retention meanwhile. A record is either replaced or deleted,
-- never both: a thread's connections run side by side, so a PUT still in flight when another
-- connection's DELETE of its record went first would rightly answer 404. Each connection
-- pauses DELAY_MS between requests, so the rate is about CONNECTIONS * 1000 / (DELAY_MS +
-- latency) per second.
--
-- The API key is read from KEY_FILE, again every second, so that the key rotations of the
-- soak move the load to the new key while the old one is in its grace period.
--
-- wrk does not say which request an answer belongs to, so the answer's body tells: a create
-- answers {"id","created_at","status":"accepted"}, a PUT or DELETE {"id","status":"accepted"},
-- a poll carries "poll_cursor" or "next_cursor".
--
-- Env: KEY_FILE (holds the sandbox key), SLUG, DELAY_MS (default 8), SINCE (poll start,
-- RFC 3339), MAX_AGE (seconds, default 3600).
-- done() prints "key value" lines: requests, rps, p50_ms, p99_ms, non2xx, socket_errors,
-- and the 202s by kind: posts_ok, puts_ok, deletes_ok, plus reads_ok.

local key_file = os.getenv("KEY_FILE")
local slug = os.getenv("SLUG")
local delay_ms = tonumber(os.getenv("DELAY_MS") or "8")
local since = os.getenv("SINCE") or "1970-01-01"
local max_age = tonumber(os.getenv("MAX_AGE") or "3600")
local words = { "lorem", "parcel", "invoice", "warsaw", "berlin", "refund", "express" }

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   ids = {}              -- records this thread created and has not deleted, oldest first
   born = {}             -- when each of them was created (os.time(), seconds)
   first, last = 1, 0    -- ids[first..last]: those still young enough to change (a deleted
                         -- one is false; counters, as # is undefined on a table with holes)
   key, key_read_at = nil, -1
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

-- The key in KEY_FILE, read again when a second has passed since the last reading.
local function current_key()
   local now = os.time()
   if now ~= key_read_at then
      local f = io.open(key_file, "r")
      if f then
         key = f:read("*l") or key
         f:close()
      end
      key_read_at = now
   end
   return key
end

-- A random record of this thread's created less than max_age seconds ago, or nil: of those
-- at an even place in ids when `parity` is 0 (replaced), at an odd one when it is 1 (deleted).
local function young_record(parity)
   local now = os.time()
   while first <= last and (ids[first] == false or now - born[first] >= max_age) do
      ids[first], born[first] = nil, nil
      first = first + 1
   end
   for _ = 1, 4 do
      if first > last then return nil end
      local i = math.random(first, last)
      if i % 2 ~= parity then i = i + 1 end
      if i <= last and ids[i] then return i end
   end
   return nil
end

function request()
   local base = "/api/v1/data/" .. slug
   local headers = { ["Authorization"] = "Bearer " .. current_key() }
   local roll = math.random(100)
   local pick = nil
   if roll > 90 then pick = young_record(roll <= 97 and 0 or 1) end
   if roll <= 70 or (roll > 90 and pick == nil) then
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
      return wrk.format("PUT", base .. "/" .. ids[pick], headers, record_body())
   else
      local id = ids[pick]
      ids[pick] = false   -- deleted: kept as a hole so that born[] stays in step
      return wrk.format("DELETE", base .. "/" .. id, headers)
   end
end

function response(status, headers, body)
   if status == 202 then
      local id = body:match('"id":"(rec_[0-9a-z]+)"')
      if body:find('"created_at"', 1, true) then
         posts_ok = posts_ok + 1
         if id then
            last = last + 1
            ids[last], born[last] = id, os.time()
         end
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
