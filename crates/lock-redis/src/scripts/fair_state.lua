#!lua flags=no-writes
-- Read the fair lock at once: holders, the lock's lease left, and the queue in order with each
-- waiter's queue deadline left in ms (by the server's clock).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines; ARGV[1] request id
-- Returns {request id, flat holders (field, count, ...), pttl, flat queue (field, ms left or
-- false, ...)}.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local queue = {}
for _, field in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do
    table.insert(queue, field)
    local deadline = redis.call('zscore', KEYS[3], field)
    if deadline then
        table.insert(queue, tonumber(deadline) - now)
    else
        table.insert(queue, false)
    end
end
return {ARGV[1], redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1]), queue}
