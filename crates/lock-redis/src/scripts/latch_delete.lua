#!lua flags=allow-oom
-- Delete a countdown latch, which opens it (Redisson's RCountDownLatch.delete), and announce it
-- with message 1 as Redisson does: distlock's waiters look again on any message and find it
-- open; a Redisson waiter reads 1 as "closed" and goes on waiting (to its timeout, or a later 0).
-- A key of another type is left alone.
-- KEYS[1] latch; ARGV[1] the latch's channel, ARGV[2] how to announce ('p' PUBLISH, 's'
-- SPUBLISH, 'b' both), ARGV[3] request id
-- Returns {request id, 1} when it existed, {request id, 0} otherwise.
--#include announce
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return {ARGV[3], 0}
end
if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a latch count')
end
redis.call('del', KEYS[1])
announce(ARGV[2], ARGV[1], '1')
return {ARGV[3], 1}
