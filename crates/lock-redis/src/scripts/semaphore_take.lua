#!lua
-- Take permits of a semaphore (Redisson's RSemaphore: a string holding the available permits).
-- KEYS[1] semaphore; ARGV[1] permits to take (at least 1), ARGV[2] request id
-- Returns {request id, 1, permits left} when taken; {request id, 0, available} when too few are
-- available (available false: the semaphore does not exist), and nothing changed.
local value = redis.call('get', KEYS[1])
if value == false then
    return {ARGV[2], 0, false}
end
local available = tonumber(value)
if available == nil then
    return redis.error_reply('WRONGTYPE the key holds ' .. value .. ', not a permit count')
end
if available >= tonumber(ARGV[1]) then
    return {ARGV[2], 1, redis.call('decrby', KEYS[1], ARGV[1])}
end
return {ARGV[2], 0, available}
