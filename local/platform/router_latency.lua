-- Per-server response-time histograms for the local router (HAProxy 2.6).
--
-- HAProxy 2.6's Prometheus exporter gives each server only an average over its
-- last 1024 requests and a maximum since start: no window, no tail. The canary
-- analysis judges latency where clients see it, as Istio's
-- istio_request_duration_milliseconds does in a cluster, so the local router
-- keeps the same kind of histogram itself: `mlops_start` (http-request) notes
-- when HAProxy had the request, `mlops_observe` (http-response) when the
-- server's answer came back, per backend (the model) and server (the version).
-- A server that is stopped, queued or overloaded shows here, while its own
-- histogram, which starts when it reads the request, cannot see the wait.
-- `mlops_latency` serves them in Prometheus' text format. Loaded with
-- `lua-load` (one shared Lua state), so the counters need no locking; a reload
-- starts them at 0, which Prometheus' increase() reads as a counter reset.

local BOUNDS = {0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2,
                0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0}
local NAME = "mlops_router_response_seconds"
local histograms = {}

local function seconds_now()
  local t = core.now()
  return t.sec + t.usec / 1000000.0
end

local function label(value)
  return (string.gsub(tostring(value), '[\\"\n]', "_"))
end

core.register_action("mlops_start", {"http-req"}, function(txn)
  txn:set_priv(seconds_now())
end)

core.register_action("mlops_observe", {"http-res"}, function(txn)
  local started = txn:get_priv()
  local server = txn.f:srv_name()
  if type(started) ~= "number" or server == nil or server == "" then
    return
  end
  local proxy = txn.f:be_name()
  local key = proxy .. "/" .. server
  local h = histograms[key]
  if h == nil then
    h = {proxy = label(proxy), server = label(server), buckets = {}, sum = 0.0, count = 0}
    for i = 1, #BOUNDS do h.buckets[i] = 0 end
    histograms[key] = h
  end
  local took = seconds_now() - started
  for i = 1, #BOUNDS do
    if took <= BOUNDS[i] then h.buckets[i] = h.buckets[i] + 1 end
  end
  h.sum = h.sum + took
  h.count = h.count + 1
end)

core.register_service("mlops_latency", "http", function(applet)
  local out = {
    "# HELP " .. NAME .. " Time from HAProxy having a request to the server's response " ..
      "headers, per backend (model) and server (version).",
    "# TYPE " .. NAME .. " histogram",
  }
  local keys = {}
  for key in pairs(histograms) do keys[#keys + 1] = key end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local h = histograms[key]
    local labels = 'proxy="' .. h.proxy .. '",server="' .. h.server .. '"'
    for i = 1, #BOUNDS do
      out[#out + 1] = string.format('%s_bucket{%s,le="%g"} %d', NAME, labels, BOUNDS[i],
                                    h.buckets[i])
    end
    out[#out + 1] = string.format('%s_bucket{%s,le="+Inf"} %d', NAME, labels, h.count)
    out[#out + 1] = string.format('%s_sum{%s} %.6f', NAME, labels, h.sum)
    out[#out + 1] = string.format('%s_count{%s} %d', NAME, labels, h.count)
  end
  local body = table.concat(out, "\n") .. "\n"
  applet:set_status(200)
  applet:add_header("content-type", "text/plain; version=0.0.4")
  applet:add_header("content-length", tostring(string.len(body)))
  applet:start_response()
  applet:send(body)
end)
