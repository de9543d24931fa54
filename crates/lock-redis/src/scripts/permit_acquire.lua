#!lua
-- Take one lease-bound permit (Redisson's RPermitExpirableSemaphore layout: the string `name`
-- holds the available permits, the sorted set `{name}:timeout` every permit out, scored by the
-- end of its lease in Unix ms). Leases are judged by the server's clock.
-- KEYS[1] count, KEYS[2] permits out, KEYS[3] fencing counter
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] the semaphore's channel, ARGV[4] how to
-- announce ('p' PUBLISH, 's' SPUBLISH, 'b' both), ARGV[5] '1' to hand out a fencing token ('k': and keep its counter),
-- ARGV[6] request id
-- Returns {request id, 1, the owner's permits, token or 0} when granted, {request id, 0, ms
-- until the nearest permit's lease ends, or -1 when no permit out has a lease} otherwise.
-- Each permit is a member `<owner field>:<k>`; an owner's permits are found by that prefix.
--#include next_fencing_token
--#include announce

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Permits whose lease ended go back to the count first (as Redisson's tryAcquire does).
local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local count = redis.call('incrby', KEYS[1], #expired)
    if count > 0 then
        announce(ARGV[4], ARGV[3], count)
    end
end

local available = tonumber(redis.call('get', KEYS[1]))
if available == nil or available < 1 then
    -- A Redisson permit taken without a lease is scored 922337203685477 (its
    -- nonExpirableTimeout) and never ends: no lease end to hint then (as Redisson's own script),
    -- so the waiter keeps its one-second re-check.
    local nearest = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    if nearest[2] and tonumber(nearest[2]) < 922337203685477 then
        return {ARGV[6], 0, math.max(0, tonumber(nearest[2]) - now)}
    end
    return {ARGV[6], 0, -1}
end

local token = next_fencing_token(KEYS[3], ARGV[5], ARGV[1])

local prefix = ARGV[2] .. ':'
local mine = 0
for _, member in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix then
        mine = mine + 1
    end
end
local k = mine + 1
while redis.call('zscore', KEYS[2], prefix .. k) do
    k = k + 1
end
redis.call('decr', KEYS[1])
redis.call('zadd', KEYS[2], now + tonumber(ARGV[1]), prefix .. k)
-- As Redisson: the permits out live as long as the count does.
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
end
return {ARGV[6], 1, mine + 1, token}
