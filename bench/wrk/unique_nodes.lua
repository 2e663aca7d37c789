-- unique_nodes for a random model over the last DAYS days (window ending now).
local models = tonumber(os.getenv("MODELS") or "20")
local days = tonumber(os.getenv("DAYS") or "30")
local function iso(t) return os.date("!%Y-%m-%dT%H:%M:%SZ", t) end
init = function() math.randomseed(os.time()) end
request = function()
  local now = os.time()
  return wrk.format("GET", string.format("/unique_nodes?model_name=bench-model-%02d%%3Alatest&start_date=%s&end_date=%s",
    math.random(0, models - 1), iso(now - days * 86400), iso(now)))
end
