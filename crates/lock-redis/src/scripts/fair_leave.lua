#!lua flags=allow-oom
-- Take a waiter out of the fair lock's queue (it gave up, or its wait was cancelled), so it
-- holds up nobody; when it was the head and the lock is free, the new head is told. Changes no
-- hold. Allowed under OOM: it frees memory.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines
-- ARGV[1] owner field, ARGV[2] the lock's channel, ARGV[3] how to announce ('p', 's', 'b'),
-- ARGV[4] request id
-- Returns {request id, 1} when it was queued, {request id, 0} otherwise.
--#include wake_head
local head = redis.call('lindex', KEYS[2], 0)
redis.call('zrem', KEYS[3], ARGV[1])
if redis.call('lrem', KEYS[2], 0, ARGV[1]) == 0 then
    return {ARGV[4], 0}
end
if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
    wake_head(KEYS[2], ARGV[3], ARGV[2])
end
return {ARGV[4], 1}
