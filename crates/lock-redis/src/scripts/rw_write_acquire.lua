#!lua
-- Take the write side of a read-write lock (Redisson's RReadWriteLock layout, see
-- rw_read_acquire.lua).
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] writers waiting (writer-preferring ones)
-- ARGV[1] lease in ms, ARGV[2] the owner's write field, ARGV[3] the owner field (its read holds),
-- ARGV[4] '1' to hand out a fencing token ('k': and keep its counter), ARGV[5] '1' when the writer is writer-preferring and
-- waits (it then records itself as waiting: new readers hold back), ARGV[6] how long its place
-- lasts without it trying again, in ms, ARGV[7] request id
-- Returns {request id, 1, write hold count, token or 0} when granted (free, or a re-entry),
-- {request id, -1} when the owner holds the read side (an upgrade would wait for itself;
-- nothing changed), {request id, 0, ms to wait at most} otherwise.
--#include next_fencing_token
--#include reenter

local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    if redis.call('exists', KEYS[1]) == 1 then
        return {ARGV[7], 0, redis.call('pttl', KEYS[1])}
    end
    redis.call('zrem', KEYS[3], ARGV[3])
    local token = next_fencing_token(KEYS[2], ARGV[4], ARGV[1])
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {ARGV[7], 1, 1, token}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local count, token = reenter(KEYS[1], ARGV[2], ARGV[1], KEYS[2], ARGV[4])
    return {ARGV[7], 1, count, token}
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
    return {ARGV[7], -1}
end
local wait = redis.call('pttl', KEYS[1])
if ARGV[5] == '1' then
    local time = redis.call('time')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    redis.call('zadd', KEYS[3], now + tonumber(ARGV[6]), ARGV[3])
    -- The set lasts no longer than its newest place: nothing is left of writers that went away.
    redis.call('pexpire', KEYS[3], ARGV[6])
    -- Try again before the place lapses.
    local again = math.floor(tonumber(ARGV[6]) / 3)
    if wait < 0 or wait > again then
        wait = again
    end
end
return {ARGV[7], 0, wait}
