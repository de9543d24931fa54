#!lua flags=allow-oom
-- Give back every lease-bound permit of a semaphore, whoever holds it (an operator's repair),
-- and announce the new count.
-- KEYS[1] count, KEYS[2] permits out; ARGV[1] the semaphore's channel, ARGV[2] how to announce
-- ('p', 's', 'b'), ARGV[3] request id
-- Returns {request id, 1} when any permit was out, {request id, 0} otherwise.
--#include announce
local out = redis.call('zcard', KEYS[2])
if out == 0 then
    return {ARGV[3], 0}
end
redis.call('del', KEYS[2])
local count = redis.call('incrby', KEYS[1], out)
announce(ARGV[2], ARGV[1], count)
return {ARGV[3], 1}
