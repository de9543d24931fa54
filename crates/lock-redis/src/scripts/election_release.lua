#!lua flags=allow-oom
-- Give back holds of an election's lock: one (a release, the rest lengthened to the lease), or
-- down to a count (the cleanup after a call of unknown outcome). When the leader's last hold
-- goes, its value goes too, candidates are woken (the lock's channel, 0) and observers told
-- (the election's channel, 0). Allowed under OOM: releasing frees memory.
-- KEYS[1] lock hash, KEYS[2] leader values
-- ARGV[1] owner field, ARGV[2] holds to keep ('' for a release: one less), ARGV[3] lease in ms,
-- ARGV[4] the lock's channel, ARGV[5] the election's channel, ARGV[6] how to announce ('p',
-- 's', 'b'), ARGV[7] request id
-- Returns {request id, -1} when the owner holds nothing (nothing changed), else {request id,
-- the owner's holds left} (0: nobody leads).
--#include announce
--#include give_back
-- The leader values live as long as the lock: lengthened with it.
local left, gone = give_back(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), KEYS[2])
if not gone then
    return {ARGV[7], left}
end
redis.call('hdel', KEYS[2], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    for _, channel in ipairs({ARGV[4], ARGV[5]}) do
        announce(ARGV[6], channel, '0')
    end
end
return {ARGV[7], 0}
