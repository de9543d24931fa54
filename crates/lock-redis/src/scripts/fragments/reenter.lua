--#include next_fencing_token
--#include lengthen
-- reenter(key, field, lease, counter, token_mode): one hold more for `field`, which holds the
-- lock hash `key` already: a fencing token first (next_fencing_token(counter, token_mode,
-- lease)), then the count, and the lease only lengthened to `lease` ms: a nested hold with a
-- shorter lease must not cut short the outer holds (whose guards count on their own, longer
-- validity). Answers the hold count, the token, and whether the lease was lengthened.
local function reenter(key, field, lease, counter, token_mode)
    local token = next_fencing_token(counter, token_mode, lease)
    local count = redis.call('hincrby', key, field, 1)
    return count, token, lengthen(key, tonumber(lease))
end
