--#include announce
-- wake_head(queue, how, channel): tells the waiter at the head of the fair lock's `queue`, if
-- any, that the lock is free: '0' on its own channel `<channel>:<owner field>` (only the head
-- is told, as Redisson's RFairLock does).
local function wake_head(queue, how, channel)
    local head = redis.call('lindex', queue, 0)
    if head ~= false then
        announce(how, channel .. ':' .. head, '0')
    end
end
