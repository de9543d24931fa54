#!lua flags=allow-oom
-- Give back holds of the fair lock: one (a release, the rest lengthened to the lease), or down
-- to a count (the cleanup after a call of unknown outcome). When the lock is freed, only the
-- waiter at the head of the queue is told, on its own channel (as Redisson's RFairLock does).
-- Allowed under OOM: releasing frees memory.
-- KEYS[1] lock hash, KEYS[2] queue
-- ARGV[1] owner field, ARGV[2] holds to keep ('' for a release: one less), ARGV[3] lease in ms,
-- ARGV[4] the lock's channel (the head's is `<channel>:<owner field>`), ARGV[5] how to announce
-- ('p', 's', 'b'), ARGV[6] request id
-- Returns {request id, -1} when the owner holds nothing (nothing changed), else {request id,
-- the owner's holds left} (0: the lock is free).
--#include wake_head
--#include give_back
local left, gone = give_back(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]))
if not gone then
    return {ARGV[6], left}
end
if redis.call('exists', KEYS[1]) == 0 then
    wake_head(KEYS[2], ARGV[5], ARGV[4])
end
return {ARGV[6], 0}
