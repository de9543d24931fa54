#!lua
-- Take the read side of a read-write lock (Redisson's RReadWriteLock: a hash with `mode`, each
-- reader's hold count under its owner field, the writer's under `<owner>:write`, and one timeout
-- key per read hold, `{name}:<owner>:rwlock_timeout:<k>`, carrying that hold's lease).
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] writers waiting (writer-preferring ones,
-- scored by the deadline of their place in Unix ms)
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] the owner's write field, ARGV[4] '1' to hand
-- out a fencing token ('k': and keep its counter), ARGV[5] request id
-- Returns {request id, 1, read hold count, token or 0} when granted (free, read mode, or a
-- downgrade: write mode held by this owner), {request id, 0, ms to wait at most} otherwise.
-- While a writer-preferring writer waits, an owner holding nothing gets no read hold. Holds of
-- the owner whose leases ran out are forgotten first (where Redisson keeps counting them).
--#include next_fencing_token
--#include lengthen
--#include read_timeout_prefix
--#include drop_lapsed_read_holds

local mode = redis.call('hget', KEYS[1], 'mode')
-- The owner's holds whose leases ran out are gone before anything counts them: it holds only
-- its live ones (for the writers' queue below, and for the count of the hold it gets).
if mode then
    drop_lapsed_read_holds(KEYS[1], ARGV[2])
end

-- Writers waiting (writer-preferring): an owner that holds nothing here waits behind them.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('zremrangebyscore', KEYS[3], '-inf', now)
local first = redis.call('zrange', KEYS[3], 0, 0, 'withscores')
if first[2]
    and redis.call('hexists', KEYS[1], ARGV[2]) == 0
    and redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    local wait = tonumber(first[2]) - now
    local pttl = redis.call('pttl', KEYS[1])
    if pttl >= 0 and pttl < wait then
        wait = pttl
    end
    return {ARGV[5], 0, wait}
end

if mode == false then
    if redis.call('exists', KEYS[1]) == 1 then
        -- A hash without a mode is a plain lock of the same name: held, not ours to change.
        return {ARGV[5], 0, redis.call('pttl', KEYS[1])}
    end
    local token = next_fencing_token(KEYS[2], ARGV[4], ARGV[1])
    redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
    redis.call('set', read_timeout_prefix(KEYS[1], ARGV[2]) .. ':1', 1, 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {ARGV[5], 1, 1, token}
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local token = next_fencing_token(KEYS[2], ARGV[4], ARGV[1])
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', read_timeout_prefix(KEYS[1], ARGV[2]) .. ':' .. count, 1, 'px', ARGV[1])
    -- Only lengthen: the other holds count on their own leases.
    lengthen(KEYS[1], tonumber(ARGV[1]))
    return {ARGV[5], 1, count, token}
end
return {ARGV[5], 0, redis.call('pttl', KEYS[1])}
