#!lua flags=allow-oom
-- Give back write holds of a read-write lock: one (a release), or down to a count (the cleanup
-- after a call of unknown outcome). Allowed under OOM: releasing frees memory.
-- KEYS[1] lock hash
-- ARGV[1] the owner's write field, ARGV[2] holds to keep ('' for a release: one less),
-- ARGV[3] lease in ms (a release lengthens what is left to it), ARGV[4] the lock's channel,
-- ARGV[5] how to announce ('p' PUBLISH, 's' SPUBLISH, 'b' both), ARGV[6] request id
-- Returns {request id, -1} when the owner holds no write hold (nothing changed), else
-- {request id, the owner's write holds left}. The last one gone, the lock is free, or stays in
-- read mode when the owner also reads (a downgrade); either way announced with 1, which wakes
-- every waiter (Redisson announces only the first: its readers waiting on a downgraded lock
-- wake on their timers).
--#include announce
local function timeout_prefix(field)
    if string.find(KEYS[1], '{', 1, true) then
        return KEYS[1] .. ':' .. field .. ':rwlock_timeout'
    end
    return '{' .. KEYS[1] .. '}:' .. field .. ':rwlock_timeout'
end

if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
    return {ARGV[6], -1}
end
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
-- Read holds left (a downgrade): the lock lives on in read mode as long as the longest of them,
-- not the write lease (where Redisson keeps the write lease); none alive: it goes.
local longest = -3
if redis.call('hlen', KEYS[1]) > 1 then
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local count = tonumber(redis.call('hget', KEYS[1], field))
        if count then
            local each = timeout_prefix(field)
            for k = count, 1, -1 do
                longest = math.max(longest, redis.call('pttl', each .. ':' .. k))
            end
        end
    end
end
if longest > 0 then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('pexpire', KEYS[1], longest)
else
    redis.call('del', KEYS[1])
end
announce(ARGV[5], ARGV[4], '1')
return {ARGV[6], 0}
