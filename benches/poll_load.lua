-- wrk script: a bounded loader for the poll drain benchmark (benches/poll_drain.sh).
--
-- POSTs exactly POLL_LOAD_TOTAL records (the same ~1 KB JSON record as the ingest benchmark:
-- the body and headers are taken from benches/post.lua) to PATH_TO_POST, split between wrk's
-- threads, and then stops. wrk itself only knows durations, so each thread counts:
--
--   * request() hands out the POST until the thread's quota has been sent; after that, while
--     the thread's last POSTs are still in flight on other connections, its connections get a
--     cheap filler `GET /healthz` (it stores nothing);
--   * response() counts 202s (stored records) and any other status except the filler's 200
--     as a failed POST; once every POST of the quota has been answered the thread writes
--     POLL_LOAD_DONE_DIR/thread-N and stops its event loop (wrk.thread:stop()).
--
-- wrk's main thread sleeps for the whole -d, so the driving script waits for one marker per
-- thread and then sends wrk SIGINT; done() then prints, one "key value" pair per line:
--   load_posted N / load_accepted N / load_failed N / load_filler N / load_done_threads N /
--   load_seconds X (first POST sent to last POST answered, all threads) / load_body_bytes N
--   (the size of the record POSTed)
-- (plus wrk_duration_s, requests and socket_errors from wrk's summary).
--
-- A POST lost to a socket error (connection reset, timeout) is never answered, so its thread
-- never finishes: the driver notices that wrk ran out its -d without all markers and fails.
-- Run with a generous --timeout (durable writes may wait on a slow fsync).
--
-- Env:
--   PATH_TO_POST        path to POST to (default: the URL's path)
--   INTAKE_KEY          bearer key
--   POLL_LOAD_TOTAL     records to create in all (required)
--   POLL_LOAD_DONE_DIR  folder for the per-thread markers (required)
--   POLL_LOAD_THREADS   wrk's -t, to split the total (required)
--   POLL_POST_LUA       post.lua to take the record from (default: next to this script)

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local post_lua = os.getenv("POLL_POST_LUA")
if post_lua == nil or post_lua == "" then
   post_lua = here .. "post.lua"
end
-- post.lua sets wrk.method, wrk.body, wrk.headers (Content-Type, Authorization) and wrk.path.
dofile(post_lua)
local post_body = wrk.body
local post_headers = {}
for k, v in pairs(wrk.headers) do
   post_headers[k] = v
end
local post_path = wrk.path
-- Nothing global: every request is built below with explicit method, headers and body.
wrk.body = nil

local total = tonumber(os.getenv("POLL_LOAD_TOTAL") or "")
local done_dir = os.getenv("POLL_LOAD_DONE_DIR")

-- ------------------------------------------------------------ main state: setup / done

local threads = {}
local nthreads_seen = 0

function setup(thread)
   table.insert(threads, thread)
   nthreads_seen = nthreads_seen + 1
   thread:set("thread_no", nthreads_seen)
end

-- ------------------------------------------------------------ thread state

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } poll_timespec;
int clock_gettime(int clk_id, poll_timespec *tp);
]]
local ts = ffi.new("poll_timespec")
-- CLOCK_MONOTONIC (1), in seconds: one clock for every thread of the process.
local function now()
   ffi.C.clock_gettime(1, ts)
   return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

-- Globals, so that done() can read them with thread:get().
quota, sent, accepted, failed, filler = 0, 0, 0, 0, 0
started_at, finished_at = 0, 0
finished = false
local post_req, filler_req
-- wrk 4 calls request() once on the first thread's state before the run, only to count the
-- requests in the string it returns (script_verify_request; nothing is sent). That call gets
-- the filler, so it does not use up a POST of the quota; were it not made, the filler would
-- merely be sent once.
local verify_pending = false

function init(args)
   if total == nil or total < 1 then
      error("poll_load.lua: POLL_LOAD_TOTAL must be a positive integer")
   end
   if done_dir == nil or done_dir == "" then
      error("poll_load.lua: POLL_LOAD_DONE_DIR is required")
   end
   local n = tonumber(os.getenv("POLL_LOAD_THREADS") or "")
   if n == nil or n < 1 then
      error("poll_load.lua: POLL_LOAD_THREADS (wrk's -t) is required")
   end
   local i = thread_no
   quota = math.floor(total / n)
   if i <= total % n then
      quota = quota + 1
   end
   post_req = wrk.format("POST", post_path, post_headers, post_body)
   filler_req = wrk.format("GET", "/healthz", {}, nil)
   verify_pending = (thread_no == 1)
   if quota == 0 then
      finish()
   end
end

function finish()
   if finished then
      return
   end
   finished = true
   finished_at = now()
   local f = assert(io.open(done_dir .. "/thread-" .. thread_no, "w"))
   f:write(string.format("%d %d %d\n", accepted, failed, filler))
   f:close()
   wrk.thread:stop()
end

function request()
   if verify_pending then
      verify_pending = false
      return filler_req
   end
   if sent < quota then
      if sent == 0 then
         started_at = now()
      end
      sent = sent + 1
      return post_req
   end
   filler = filler + 1
   return filler_req
end

function response(status, headers, body)
   if status == 202 then
      accepted = accepted + 1
   elseif status ~= 200 then
      failed = failed + 1
   end
   if accepted + failed >= quota then
      finish()
   end
end

function done(summary, latency, requests)
   local posted, acc, fail, fill, ndone = 0, 0, 0, 0, 0
   local t0, t1 = nil, nil
   for _, t in ipairs(threads) do
      posted = posted + (t:get("sent") or 0)
      acc = acc + (t:get("accepted") or 0)
      fail = fail + (t:get("failed") or 0)
      fill = fill + (t:get("filler") or 0)
      if t:get("finished") then
         ndone = ndone + 1
         local s, f = t:get("started_at"), t:get("finished_at")
         if s and s > 0 and (t0 == nil or s < t0) then t0 = s end
         if f and f > 0 and (t1 == nil or f > t1) then t1 = f end
      end
   end
   local e = summary.errors
   io.write(string.format("load_posted %d\n", posted))
   io.write(string.format("load_accepted %d\n", acc))
   io.write(string.format("load_failed %d\n", fail))
   io.write(string.format("load_filler %d\n", fill))
   io.write(string.format("load_done_threads %d\n", ndone))
   -- first POST sent to last POST answered (all threads); wrk's own duration runs until
   -- the driver's SIGINT
   if t0 and t1 and ndone == #threads then
      io.write(string.format("load_seconds %.3f\n", t1 - t0))
   end
   io.write(string.format("load_body_bytes %d\n", #post_body))
   io.write(string.format("wrk_duration_s %.3f\n", summary.duration / 1e6))
   io.write(string.format("requests %d\n", summary.requests))
   io.write(string.format("socket_errors %d\n", e.connect + e.read + e.write + e.timeout))
end
