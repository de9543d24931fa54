#!lua flags=allow-oom
-- After an acquire of unknown outcome: lower the owner's hold count to at most `keep`.
-- Idempotent, unlike retrying the acquire.
-- KEYS[1] lock hash; ARGV[1] owner field, ARGV[2] holds to keep,
-- ARGV[3] release channel, ARGV[4] release message, ARGV[5] how to announce the release
-- ('p' PUBLISH, 's' SPUBLISH (a cluster's sharded channels), 'b' both), ARGV[6] request id
-- Returns {request id, 1} when something changed, {request id, 0} otherwise.
--#include announce
local held = redis.call('hget', KEYS[1], ARGV[1])
if not held then
    return {ARGV[6], 0}
end
local keep = tonumber(ARGV[2])
if tonumber(held) <= keep then
    return {ARGV[6], 0}
end
if keep > 0 then
    redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
    return {ARGV[6], 1}
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    announce(ARGV[5], ARGV[3], ARGV[4])
end
return {ARGV[6], 1}
