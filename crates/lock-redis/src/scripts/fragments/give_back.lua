--#include lengthen
-- give_back(key, field, keep, lease_ms, with): gives back holds of the hash `key`'s `field`:
-- one (`keep` '', a release: the holds left lengthened to lease_ms, and the key `with` too
-- when given and the lock was) or down to `keep` holds (the cleanup after a call of unknown
-- outcome). Answers the holds left, -1 when the field held nothing (nothing changed), and
-- whether the field went: then the caller frees the lock or announces.
local function give_back(key, field, keep, lease_ms, with)
    local held = tonumber(redis.call('hget', key, field))
    if held == nil then
        return -1, false
    end
    local left = held - 1
    if keep ~= '' then
        left = tonumber(keep)
        if held <= left then
            return held, false
        end
    end
    if left > 0 then
        redis.call('hset', key, field, left)
        if keep == '' and lengthen(key, lease_ms) and with then
            redis.call('pexpire', with, lease_ms)
        end
        return left, false
    end
    redis.call('hdel', key, field)
    return 0, true
end
