#!lua flags=allow-oom
-- Depose an election's leader, whoever it is: delete the lock and the leader values, wake the
-- candidates and tell the observers.
-- KEYS[1] lock hash, KEYS[2] leader values; ARGV[1] the lock's channel, ARGV[2] the election's
-- channel, ARGV[3] how to announce ('p', 's', 'b'), ARGV[4] request id
-- Returns {request id, 1} when someone led, {request id, 0} otherwise.
--#include announce
redis.call('del', KEYS[2])
if redis.call('del', KEYS[1]) == 0 then
    return {ARGV[4], 0}
end
for _, channel in ipairs({ARGV[1], ARGV[2]}) do
    announce(ARGV[3], channel, '0')
end
return {ARGV[4], 1}
