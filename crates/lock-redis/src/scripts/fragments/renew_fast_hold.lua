--#include lengthen
-- renew_fast_hold(name, owner, lease_ms, key_type): renew_each's step for a fast-lock key:
-- its lease lengthened when it holds `owner`. A key that is not a string (the name lapsed and was
-- re-taken by the reentrant lock, or written by someone else) is not ours: 0, left alone.
local function renew_fast_hold(name, owner, lease_ms, key_type)
    if key_type == 'string' and redis.call('get', name) == owner then
        lengthen(name, lease_ms)
        return 1
    end
    return 0
end
