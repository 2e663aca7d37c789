-- daily_points for a random node with its own key, last_days 30.
-- Keys are read from the file named by the KEYS environment variable: "name,key" per line.
local names, keys = {}, {}
-- keys.lua beside this script, wherever wrk is run from.
local load_keys = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "keys.lua")
init = function() names, keys = load_keys(); math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 100000) end
request = function()
  local i = math.random(#names)
  return wrk.format("POST", "/daily_points", { ["content-type"] = "application/json", ["api_key"] = keys[i] },
    '{"node_name":"' .. names[i] .. '","last_days":30}')
end
