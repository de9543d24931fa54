--#include lengthen
-- renew_hold(name, owner, lease_ms, key_type): renew_each's step for a lock hash (the
-- reentrant lock's, the fair lock's, the read-write lock's writer): its lease lengthened when it
-- holds the field `owner`. A key that is not a hash (the name lapsed and was re-taken by the fast
-- lock, or written by someone else) is not ours: 0, left alone.
local function renew_hold(name, owner, lease_ms, key_type)
    if key_type == 'hash' and redis.call('hexists', name, owner) == 1 then
        lengthen(name, lease_ms)
        return 1
    end
    return 0
end
