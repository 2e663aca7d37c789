-- daily_points for a random node with its own key, last_days 30.
-- Keys are read from the file named by the KEYS environment variable: "name,key" per line.
local names, keys = {}, {}
local function load()
  for line in io.lines(os.getenv("KEYS")) do
    local n, k = line:match("^([^,]+),([^,]+)$")
    if n and n ~= "name" then names[#names + 1] = n; keys[#keys + 1] = k end
  end
end
init = function() load(); math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 100000) end
request = function()
  local i = math.random(#names)
  return wrk.format("POST", "/daily_points", { ["content-type"] = "application/json", ["api_key"] = keys[i] },
    '{"node_name":"' .. names[i] .. '","last_days":30}')
end
