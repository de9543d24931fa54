#!lua
-- Take every available permit of a semaphore (Redisson's drainPermits); announces nothing.
-- KEYS[1] semaphore; ARGV[1] request id
-- Returns {request id, the count before} (0 when the semaphore does not exist).
local before = redis.call('get', KEYS[1])
if before == false then
    return {ARGV[1], 0}
end
local count = tonumber(before)
if count == nil then
    return redis.error_reply('WRONGTYPE the key holds ' .. before .. ', not a permit count')
end
redis.call('set', KEYS[1], 0)
return {ARGV[1], count}
