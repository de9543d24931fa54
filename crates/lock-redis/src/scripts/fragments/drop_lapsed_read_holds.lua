--#include read_timeout_prefix
-- drop_lapsed_read_holds(name, field): forgets the read holds of `field` on the read-write lock
-- `name` whose leases ran out (their timeout keys are gone), renumbering the live ones 1..n as
-- Redisson expects; returns n. A hold ends with its lease (the contract): without this, a hold
-- nobody released (an acquire whose answer was lost, a crashed process's) stays counted under
-- its owner for as long as other readers keep the lock alive, and the owner's next read hold
-- would count it (Redisson's own read lock keeps counting it until it is unlocked).
local function drop_lapsed_read_holds(name, field)
    local count = tonumber(redis.call('hget', name, field))
    if not count then
        return 0
    end
    local prefix = read_timeout_prefix(name, field)
    local live = 0
    for k = 1, count do
        local key = prefix .. ':' .. k
        if redis.call('exists', key) == 1 then
            live = live + 1
            if live ~= k then
                redis.call('rename', key, prefix .. ':' .. live)
            end
        end
    end
    if live == count then
        return count
    end
    if live > 0 then
        redis.call('hset', name, field, live)
    else
        redis.call('hdel', name, field)
    end
    return live
end
