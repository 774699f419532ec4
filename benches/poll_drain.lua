-- wrk script: drains an intake poll feed, one keep-alive connection, one page at a time.
--
-- Run it with `wrk -t1 -c1` (one connection: each request depends on the previous answer):
--
--   GET POLL_PATH?since=POLL_SINCE&limit=POLL_LIMIT
--   then GET POLL_PATH?cursor=<next_cursor>&limit=POLL_LIMIT while the answer has next_cursor,
--   up to and including the first answer that has poll_cursor instead (caught up).
--
-- Per page it counts the records (occurrences of `"id":"rec_`: a record id inside `data`;
-- the payloads of the benchmark hold no such string), checks that the ids strictly increase
-- across the whole drain (ids sort by created_at then tiebreak, and their base32 text sorts
-- like the number), and times the page with CLOCK_MONOTONIC from just before wrk writes the
-- request to the response handler (the same span wrk's own latency covers).
--
-- Once caught up (or on the first non-200 answer) it writes POLL_DONE_FILE and stops wrk's
-- thread (wrk.thread:stop()); wrk's main thread still sleeps out its -d, so the driver waits
-- for the file and sends wrk SIGINT. Without POLL_DONE_FILE it keeps polling the poll_cursor
-- until -d runs out (only the drain itself is counted in the figures).
--
-- done() prints one "key value" pair per line:
--   drain_records N / drain_pages N / drain_seconds X / drain_records_per_s X /
--   drain_mb_per_s X / page_p50_ms X / page_p90_ms X / page_p99_ms X / page_max_ms X /
--   page_mean_ms X / order_violations N / http_errors N / last_status N / caught_up 0|1 /
--   drain_bytes N / wrk_requests N / wrk_p50_ms X / wrk_p99_ms X / socket_errors N
--
-- Env:
--   POLL_PATH       e.g. /api/v1/data/SLUG/poll (default: the URL's path)
--   INTAKE_KEY      bearer key (the endpoint's sandbox_key)
--   POLL_SINCE      default 2000-01-01
--   POLL_LIMIT      default 100
--   POLL_DONE_FILE  written once caught up (optional, see above)

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } poll_timespec;
int clock_gettime(int clk_id, poll_timespec *tp);
void *memmem(const void *haystack, size_t haystacklen, const void *needle, size_t needlelen);
int memcmp(const void *s1, const void *s2, size_t n);
]]
local ts = ffi.new("poll_timespec")
local function now() -- CLOCK_MONOTONIC, seconds
   ffi.C.clock_gettime(1, ts)
   return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local function getenv(name, default)
   local v = os.getenv(name)
   if v == nil or v == "" then
      return default
   end
   return v
end

local poll_path = getenv("POLL_PATH", wrk.path)
local key = getenv("INTAKE_KEY", nil)
local since = getenv("POLL_SINCE", "2000-01-01")
local limit = getenv("POLL_LIMIT", "100")
local done_file = getenv("POLL_DONE_FILE", nil)

-- Percent-encodes everything but RFC 3986's unreserved characters. (intake's cursors are
-- base64url, so this leaves them as they are; it is here so the client does not rely on it.)
local function urlencode(s)
   return (s:gsub("[^%w%-%._~]", function(c)
      return string.format("%%%02X", string.byte(c))
   end))
end

-- ------------------------------------------------------------ main state: setup / done

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

-- ------------------------------------------------------------ thread state

local headers = {}
if key ~= nil then
   headers["Authorization"] = "Bearer " .. key
end

local next_path = poll_path .. "?since=" .. urlencode(since) .. "&limit=" .. urlencode(limit)
local sent_at = 0
local lat = {} -- per-page latency, seconds
local last_id = ffi.new("char[?]", 30) -- the previous record id ("rec_" + 26), for the order check
local have_last = false

-- Globals, read by done() through thread:get().
drain_records, drain_pages, drain_bytes = 0, 0, 0
drain_started, drain_ended = 0, 0
lua_seconds = 0 -- time spent in response() counting and checking the records
order_violations, http_errors, last_status = 0, 0, 0
caught_up = false
finished = false
page_p50, page_p90, page_p99, page_max, page_mean = 0, 0, 0, 0, 0

local function percentile(sorted, p)
   local n = #sorted
   if n == 0 then
      return 0
   end
   -- nearest rank
   local i = math.ceil(p / 100 * n)
   if i < 1 then
      i = 1
   end
   return sorted[i]
end

local function finish()
   if finished then
      return
   end
   finished = true
   drain_ended = now()
   local sorted = {}
   local sum = 0
   for i = 1, #lat do
      sorted[i] = lat[i]
      sum = sum + lat[i]
   end
   table.sort(sorted)
   page_p50 = percentile(sorted, 50)
   page_p90 = percentile(sorted, 90)
   page_p99 = percentile(sorted, 99)
   page_max = sorted[#sorted] or 0
   if #sorted > 0 then
      page_mean = sum / #sorted
   end
   if done_file ~= nil then
      local f = assert(io.open(done_file, "w"))
      f:write(string.format("%d %d\n", drain_records, drain_pages))
      f:close()
      wrk.thread:stop()
   end
end

function request()
   sent_at = now()
   if drain_started == 0 then
      drain_started = sent_at
   end
   return wrk.format("GET", next_path, headers, nil)
end

local MARK = '"id":"rec_'
local MARK_LEN = #MARK
local ID_OFF = 6  -- the id starts after `"id":"`
local ID_LEN = 30 -- "rec_" + 26 base32 characters

function response(status, hdrs, body)
   local t = now()
   if finished then
      return -- caught up and still polling (no POLL_DONE_FILE): not counted
   end
   last_status = status
   if status ~= 200 then
      http_errors = http_errors + 1
      io.stderr:write(string.format("poll_drain.lua: HTTP %d: %s\n", status, body:sub(1, 300)))
      finish()
      return
   end
   drain_pages = drain_pages + 1
   drain_bytes = drain_bytes + #body
   lat[drain_pages] = t - sent_at

   -- Count the records and check their order. With libc's memmem/memcmp through LuaJIT's FFI
   -- (no Lua string per id): a page of 100 records costs a few microseconds, where
   -- string.find plus a substring per id took ~0.15 ms.
   local n = 0
   local base = ffi.cast("const char *", body)
   local len = #body
   local off = 0
   while true do
      local hit = ffi.C.memmem(base + off, len - off, MARK, MARK_LEN)
      if hit == nil then
         break
      end
      local at = tonumber(ffi.cast("const char *", hit) - base)
      if at + ID_OFF + ID_LEN > len then
         break
      end
      local id = base + at + ID_OFF
      if have_last and ffi.C.memcmp(id, last_id, ID_LEN) <= 0 then
         order_violations = order_violations + 1
      end
      ffi.copy(last_id, id, ID_LEN)
      have_last = true
      n = n + 1
      off = at + ID_OFF + ID_LEN
   end
   drain_records = drain_records + n
   lua_seconds = lua_seconds + (now() - t)

   -- the cursor fields come after `data`, at the end of the body
   local tail_from = #body - 256
   if tail_from < 1 then
      tail_from = 1
   end
   local cursor = body:match('"next_cursor":"([^"]*)"', tail_from)
   if cursor ~= nil then
      next_path = poll_path .. "?cursor=" .. urlencode(cursor) .. "&limit=" .. urlencode(limit)
      return
   end
   local pcursor = body:match('"poll_cursor":"([^"]*)"', tail_from)
   if pcursor ~= nil then
      caught_up = true
      next_path = poll_path .. "?cursor=" .. urlencode(pcursor) .. "&limit=" .. urlencode(limit)
   else
      io.stderr:write("poll_drain.lua: answer has neither next_cursor nor poll_cursor\n")
      http_errors = http_errors + 1
   end
   finish()
end

function done(summary, latency, requests)
   local t = threads[1]
   if t == nil then
      return
   end
   local records = t:get("drain_records") or 0
   local pages = t:get("drain_pages") or 0
   local bytes = t:get("drain_bytes") or 0
   local secs = (t:get("drain_ended") or 0) - (t:get("drain_started") or 0)
   if not t:get("finished") then
      secs = 0
   end
   local rps, mbps = 0, 0
   if secs > 0 then
      rps = records / secs
      mbps = bytes / secs / 1e6
   end
   local e = summary.errors
   local ms = function(name)
      return (t:get(name) or 0) * 1000
   end
   io.write(string.format("drain_records %d\n", records))
   io.write(string.format("drain_pages %d\n", pages))
   io.write(string.format("drain_bytes %d\n", bytes))
   io.write(string.format("drain_seconds %.3f\n", secs))
   io.write(string.format("drain_records_per_s %.0f\n", rps))
   io.write(string.format("drain_mb_per_s %.1f\n", mbps))
   io.write(string.format("page_p50_ms %.3f\n", ms("page_p50")))
   io.write(string.format("page_p90_ms %.3f\n", ms("page_p90")))
   io.write(string.format("page_p99_ms %.3f\n", ms("page_p99")))
   io.write(string.format("page_max_ms %.3f\n", ms("page_max")))
   io.write(string.format("page_mean_ms %.3f\n", ms("page_mean")))
   local per_page = 0
   if pages > 0 then
      per_page = (t:get("lua_seconds") or 0) / pages * 1000
   end
   io.write(string.format("lua_ms_per_page %.4f\n", per_page))
   io.write(string.format("order_violations %d\n", t:get("order_violations") or 0))
   io.write(string.format("http_errors %d\n", t:get("http_errors") or 0))
   io.write(string.format("last_status %d\n", t:get("last_status") or 0))
   io.write(string.format("caught_up %d\n", t:get("caught_up") and 1 or 0))
   -- wrk's own view: the requests it completed (equals the pages when POLL_DONE_FILE is set),
   -- and its latency percentiles, which wrk corrects for coordinated omission (it adds
   -- synthetic samples for answers slower than the average interval): shown, not used
   io.write(string.format("wrk_requests %d\n", summary.requests))
   io.write(string.format("wrk_p50_ms %.3f\n", latency:percentile(50) / 1000))
   io.write(string.format("wrk_p99_ms %.3f\n", latency:percentile(99) / 1000))
   io.write(string.format("socket_errors %d\n", e.connect + e.read + e.write + e.timeout))
end
