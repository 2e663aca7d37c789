-- Ceiling: the trivial route of the same server.
request = function() return wrk.format("GET", "/healthz") end
