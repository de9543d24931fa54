#!lua
-- Set a countdown latch's count unless it exists (Redisson's RCountDownLatch.trySetCount), and
-- announce the new count (message 1).
-- KEYS[1] latch; ARGV[1] count, ARGV[2] the latch's channel, ARGV[3] how to announce ('p'
-- PUBLISH, 's' SPUBLISH, 'b' both), ARGV[4] request id
-- Returns {request id, 1} when set, {request id, 0} when it existed (nothing changed).
--#include announce
if redis.call('exists', KEYS[1]) == 1 then
    return {ARGV[4], 0}
end
redis.call('set', KEYS[1], ARGV[1])
announce(ARGV[3], ARGV[2], '1')
return {ARGV[4], 1}
