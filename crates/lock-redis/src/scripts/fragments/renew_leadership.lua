--#include lengthen
-- renew_leadership(name, owner, lease_ms, key_type): renew_each's step for an election: the
-- lock hash and its leader values, which live together, each lengthened when `owner` leads. The
-- values key is `distlock_leader:{name}` (`distlock_leader:name` when the name has its own
-- hash tag), derived here as the client derives it.
local function renew_leadership(name, owner, lease_ms, key_type)
    if key_type == 'hash' and redis.call('hexists', name, owner) == 1 then
        lengthen(name, lease_ms)
        if string.find(name, '{', 1, true) then
            lengthen('distlock_leader:' .. name, lease_ms)
        else
            lengthen('distlock_leader:{' .. name .. '}', lease_ms)
        end
        return 1
    end
    return 0
end
