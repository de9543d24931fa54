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
--#include give_back
--#include longest_read_hold
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
    return {ARGV[6], -1}
end
local left, gone = give_back(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]))
if not gone then
    return {ARGV[6], left}
end
-- Read holds left (a downgrade): the lock lives on in read mode as long as the longest of them,
-- not the write lease (where Redisson keeps the write lease); none alive: it goes.
local longest = -3
if redis.call('hlen', KEYS[1]) > 1 then
    longest = longest_read_hold(KEYS[1])
end
if longest > 0 then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('pexpire', KEYS[1], longest)
else
    redis.call('del', KEYS[1])
end
announce(ARGV[5], ARGV[4], '1')
return {ARGV[6], 0}
