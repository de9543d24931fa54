--#include read_timeout_prefix
-- longest_read_hold(name): the longest lease left (PTTL, ms) of any read hold of the read-write
-- lock `name`, over every field's timeout keys; -3 when there is none, and below 0 when none
-- is alive.
local function longest_read_hold(name)
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', name)) do
        local count = tonumber(redis.call('hget', name, field))
        if count then
            local each = read_timeout_prefix(name, field)
            for k = count, 1, -1 do
                longest = math.max(longest, redis.call('pttl', each .. ':' .. k))
            end
        end
    end
    return longest
end
