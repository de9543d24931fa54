#!lua
-- Take the fair lock (Redisson's RFairLock layout: the lock hash as RLock's, the FIFO list
-- `redisson_lock_queue:{name}` of waiting owner fields, and the sorted set
-- `redisson_lock_timeout:{name}` of their queue deadlines in Unix ms), with the deadlines taken
-- from the server's clock (Redisson's clients use their own).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] fencing counter
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] '1' to hand out a fencing token ('k': and keep its counter), ARGV[4]
-- '1' when the caller waits (queue it), ARGV[5] how long a waiter stays queued without trying
-- again, in ms, ARGV[6] request id
-- Returns {request id, 1, hold count, token or 0} when granted, {request id, 0, ms to wait at
-- most before trying again} otherwise.
--#include next_fencing_token
--#include reenter

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local keep_queued = tonumber(ARGV[5])

-- Waiters at the head whose deadline passed went away: drop them (as Redisson does). Not the
-- caller's own entry: it is here, trying, and keeps its place with a fresh deadline below (a
-- Redisson grant or acquireFailed takes Redisson's wait, 5 minutes, off the deadlines of the
-- waiters queued, so a live waiter's can have lapsed).
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if head == false or head == ARGV[2] then
        break
    end
    local deadline = redis.call('zscore', KEYS[3], head)
    if deadline ~= false and tonumber(deadline) > now then
        break
    end
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
end

if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head == false or head == ARGV[2] then
        local token = next_fencing_token(KEYS[4], ARGV[3], ARGV[1])
        if head ~= false then
            redis.call('lpop', KEYS[2])
        end
        redis.call('zrem', KEYS[3], ARGV[2])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {ARGV[6], 1, 1, token}
    end
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local count, token = reenter(KEYS[1], ARGV[2], ARGV[1], KEYS[4], ARGV[3])
    return {ARGV[6], 1, count, token}
end

-- Not this owner's turn: queue it (or keep its place, with a fresh deadline), and say when to
-- try again at the latest: before its place would lapse, or when the lock's lease or the
-- head's deadline runs out, whichever comes first.
local again = math.floor(keep_queued / 3)
if ARGV[4] == '1' then
    if redis.call('zadd', KEYS[3], now + keep_queued, ARGV[2]) == 1 then
        redis.call('rpush', KEYS[2], ARGV[2])
    end
end
local pttl = redis.call('pttl', KEYS[1])
if pttl >= 0 and pttl < again then
    again = pttl
end
local head = redis.call('lindex', KEYS[2], 0)
if pttl < 0 and head ~= false and head ~= ARGV[2] then
    local deadline = redis.call('zscore', KEYS[3], head)
    if deadline ~= false then
        again = math.min(again, math.max(0, tonumber(deadline) - now))
    end
end
return {ARGV[6], 0, again}
