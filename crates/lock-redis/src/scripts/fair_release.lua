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
--#include announce
local held = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if held == nil then
    return {ARGV[6], -1}
end
local keep = held - 1
if ARGV[2] ~= '' then
    keep = tonumber(ARGV[2])
    if held <= keep then
        return {ARGV[6], held}
    end
end
if keep > 0 then
    redis.call('hset', KEYS[1], ARGV[1], keep)
    if ARGV[2] == '' and redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
        redis.call('pexpire', KEYS[1], ARGV[3])
    end
    return {ARGV[6], keep}
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then
        announce(ARGV[5], ARGV[4] .. ':' .. head, '0')
    end
end
return {ARGV[6], 0}
