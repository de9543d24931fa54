--#include lengthen
--#include read_timeout_prefix
-- renew_read_holds(name, owner, lease_ms, key_type): renew_each's step for a read-write
-- lock's reader: the timeout keys of the owner's read holds (see read_timeout_prefix) and the
-- lock hash are lengthened. 0 when the owner holds no read hold.
local function renew_read_holds(name, owner, lease_ms, key_type)
    local count = nil
    if key_type == 'hash' then
        count = tonumber(redis.call('hget', name, owner))
    end
    if not count then
        return 0
    end
    local prefix = read_timeout_prefix(name, owner)
    for k = count, 1, -1 do
        lengthen(prefix .. ':' .. k, lease_ms)
    end
    lengthen(name, lease_ms)
    return 1
end
