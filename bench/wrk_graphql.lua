-- wrk script used by bench/api_throughput.py for every target (GraphQL POSTs
-- and plain GETs alike). The request is built once from the environment:
--   WRK_METHOD         HTTP method (default GET)
--   WRK_BODY           request body; when set, Content-Type is application/json
--   WRK_AUTHORIZATION  value of the Authorization header, if any
-- No request() function is defined, so wrk keeps its pre-built fast path.
-- done() prints one machine-readable line, prefixed "WRK_JSON ".

wrk.method = os.getenv("WRK_METHOD") or "GET"

local body = os.getenv("WRK_BODY")
if body ~= nil and body ~= "" then
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end

local auth = os.getenv("WRK_AUTHORIZATION")
if auth ~= nil and auth ~= "" then
  wrk.headers["Authorization"] = auth
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"non_2xx_3xx":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,' ..
    '"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes,
    e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean))
end
