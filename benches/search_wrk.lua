-- wrk script of benches/search.sh: one search request, sent again and again on one keep-alive
-- connection (run wrk with -t1 -c1), stopping after SEARCH_REQUESTS answers (default 200).
-- Prints every latency in microseconds on one line, "latencies_us v1 v2 ...", and the counts
-- of answers and of non-2xx answers, for search_bench.py to read.
--
--   wrk -t1 -c1 -d5s -s benches/search_wrk.lua http://127.0.0.1:PORT -- PATH_AND_QUERY KEY

local answers = 0
local wanted = tonumber(os.getenv("SEARCH_REQUESTS") or "200")

function init(args)
  wrk.method = "GET"
  wrk.path = args[1]
  wrk.headers["Authorization"] = "Bearer " .. args[2]
  wrk.headers["Accept"] = "application/json"
end

function response(status, headers, body)
  answers = answers + 1
  if answers >= wanted then
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  -- The i-th smallest latency is the percentile (i - 0.5) / n: wrk's percentile takes the
  -- sample of rank round(p / 100 * n + 0.5) = i, so this lists every sample.
  local n = summary.requests
  local out = {}
  for i = 1, n do
    out[i] = latency:percentile((i - 0.5) / n * 100)
  end
  io.write("latencies_us " .. table.concat(out, " ") .. "\n")
  io.write("answers " .. n .. "\n")
  io.write("non_2xx " .. summary.errors.status .. "\n")
end
