#!lua flags=no-writes
-- Read a semaphore of lease-bound permits at once: the count, every permit out with the ms its
-- lease has left (0 or below: expired, not yet given back), by the server's clock.
-- KEYS[1] count, KEYS[2] permits out; ARGV[1] request id
-- Returns {request id, count or false, flat list of member, ms left, ...}.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local out = {}
local members = redis.call('zrange', KEYS[2], 0, -1, 'withscores')
for i = 1, #members, 2 do
    table.insert(out, members[i])
    table.insert(out, tonumber(members[i + 1]) - now)
end
return {ARGV[1], redis.call('get', KEYS[1]), out}
