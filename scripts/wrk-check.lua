-- wrk script: POSTs {"value":{"name":"<n>"}} with a different name on each request and
-- counts answers whose body is not the matching greeting (wrong or swapped results).
local counter = 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  wrong = 0
  expected = {}
  first = 0
  last = 0
end

function request()
  counter = counter + 1
  last = last + 1
  local name = "n" .. counter .. "_" .. math.random(1000000)
  expected[last] = name
  local body = '{"value":{"name":"' .. name .. '"}}'
  return wrk.format("POST", "/run", {["Content-Type"] = "application/json"}, body)
end

local function greeting(name)
  return '{"message":"Hello, ' .. tostring(name) .. '!"}\n'
end

-- Run with as many threads as connections: one keep-alive connection per thread answers in
-- order, so each answer must greet the oldest name still waiting.
function response(status, headers, body)
  -- wrk builds one request before the run starts and never sends it: skip that one.
  if first == 0 and body == greeting(expected[2]) then
    first = 1
  end
  first = first + 1
  local name = expected[first]
  expected[first] = nil
  if status ~= 200 or body ~= greeting(name) then
    wrong = wrong + 1
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do
    total = total + t:get("wrong")
  end
  io.write(string.format("wrong or non-200 answers: %d of %d\n", total, summary.requests))
  io.write(string.format("latency p50 %.0f us, p99 %.0f us\n", latency:percentile(50), latency:percentile(99)))
end
