#!lua
-- Set a semaphore's permits whatever they were (an operator's reset), and announce them. A key
-- of another type (a lock) is left alone.
-- KEYS[1] semaphore; ARGV[1] permits, ARGV[2] the semaphore's channel, ARGV[3] how to announce
-- ('p' PUBLISH, 's' SPUBLISH, 'b' both), ARGV[4] request id
-- Returns {request id, the count before} (false: it did not exist).
--#include announce
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a permit count')
end
local before = redis.call('get', KEYS[1])
redis.call('set', KEYS[1], ARGV[1])
announce(ARGV[3], ARGV[2], ARGV[1])
return {ARGV[4], before}
