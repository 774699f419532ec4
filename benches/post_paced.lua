-- wrk script for the webhook latency phase: benches/post.lua's POST, paced.
--
-- Each connection waits DELAY_MS (env, default 10) before each request, so
-- C connections send about C * 1000 / DELAY_MS requests per second (a little
-- less: the answer's own latency adds to each cycle). Debian's wrk has no
-- fixed-rate mode; wrk calls delay() before every request.
dofile(os.getenv("BENCH_DIR") .. "/post.lua")

local delay_ms = tonumber(os.getenv("DELAY_MS") or "10")

function delay()
   return delay_ms
end
