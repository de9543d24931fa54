#!lua flags=allow-oom
-- Count a countdown latch down by one (Redisson's RCountDownLatch.countDown): at zero or below
-- the key goes, and reaching exactly zero is announced (message 0: every waiter goes on).
-- Allowed under OOM: it frees memory or changes a number in place.
-- KEYS[1] latch; ARGV[1] the latch's channel, ARGV[2] how to announce ('p' PUBLISH, 's'
-- SPUBLISH, 'b' both), ARGV[3] request id
-- Returns {request id, the count left} (0 once open).
--#include announce
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
end
if left == 0 then
    announce(ARGV[2], ARGV[1], '0')
end
if left < 0 then
    left = 0
end
return {ARGV[3], left}
