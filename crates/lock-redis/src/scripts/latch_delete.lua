#!lua flags=allow-oom
-- Delete a countdown latch, which opens it (Redisson's RCountDownLatch.delete), and announce it
-- with message 1 as Redisson does: distlock's waiters look again on any message and find it
-- open; a Redisson waiter reads 1 as "closed" and goes on waiting (to its timeout, or a later 0).
-- A key of another type is left alone.
-- KEYS[1] latch; ARGV[1] the latch's channel, ARGV[2] how to announce ('p' PUBLISH, 's'
-- SPUBLISH, 'b' both), ARGV[3] request id
-- Returns {request id, 1} when it existed, {request id, 0} otherwise.
--#include delete_typed
return delete_typed(KEYS[1], 'string', 'latch count', ARGV[3], ARGV[2], ARGV[1], '1')
