#!lua flags=allow-oom
-- A writer-preferring writer gives up waiting: forget it, and when no writer waits any more,
-- wake every waiter (readers it held back may come in). Allowed under OOM: it frees memory.
-- KEYS[1] writers waiting; ARGV[1] owner field, ARGV[2] the lock's channel, ARGV[3] how to
-- announce ('p', 's', 'b'), ARGV[4] request id
-- Returns {request id, 1} when it was waiting, {request id, 0} otherwise.
--#include announce
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return {ARGV[4], 0}
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call('zcount', KEYS[1], now, '+inf') == 0 then
    announce(ARGV[3], ARGV[2], '1')
end
return {ARGV[4], 1}
