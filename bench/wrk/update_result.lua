-- update_result with a fresh job id per request, for a random node and a skewed model.
local names, keys = {}, {}
local models = tonumber(os.getenv("MODELS") or "20")
local run = os.getenv("RUN") or "wrk"
local counter, thread_id = 0, 0
-- keys.lua beside this script, wherever wrk is run from.
local load_keys = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "keys.lua")
local threads = 0
setup = function(thread) threads = threads + 1; thread:set("thread_id", threads) end
init = function() names, keys = load_keys(); math.randomseed(os.time() + thread_id * 7919) end
request = function()
  counter = counter + 1
  local i = math.random(#names)
  local m = math.floor(models / math.random(1, models)) - 1
  local status = (math.random() < 0.95) and "success" or "error"
  local body = string.format('{"job_id":"%s-%d-%d","api_key":"%s","model_name":"bench-model-%02d:latest","result":{"message":"benchmark output"},"status":"%s"}',
    run, thread_id, counter, keys[i], m, status)
  return wrk.format("POST", "/worker/update_result", { ["content-type"] = "application/json" }, body)
end
