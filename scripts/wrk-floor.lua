-- wrk script: the same POST as wrk-check.lua, sent to a path with no action behind it, to
-- measure what HTTP alone costs (the floor under every activation).
wrk.method = "POST"
wrk.body = '{"value":{"name":"floor"}}'
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  io.write(string.format("latency p50 %.0f us, p99 %.0f us\n", latency:percentile(50), latency:percentile(99)))
end
