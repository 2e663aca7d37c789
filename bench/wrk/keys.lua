-- The node names and keys of the file named by the KEYS environment variable ("name,key" per
-- line, a header line allowed), for the wrk scripts beside this one.
return function()
  local names, keys = {}, {}
  for line in io.lines(os.getenv("KEYS")) do
    local n, k = line:match("^([^,]+),([^,]+)$")
    if n and n ~= "name" then names[#names + 1] = n; keys[#keys + 1] = k end
  end
  return names, keys
end
