#!lua flags=allow-oom
-- Delete the fair lock whoever holds it, and tell the waiter at the head of the queue.
-- KEYS[1] lock hash, KEYS[2] queue; ARGV[1] the lock's channel, ARGV[2] how to announce ('p',
-- 's', 'b'), ARGV[3] request id
-- Returns {request id, 1} when the lock existed, {request id, 0} otherwise.
--#include wake_head
if redis.call('del', KEYS[1]) == 0 then
    return {ARGV[3], 0}
end
wake_head(KEYS[2], ARGV[2], ARGV[1])
return {ARGV[3], 1}
