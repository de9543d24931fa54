#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many fast-lock leases at once on one cluster node, whatever their slots (as
-- renew_across_slots.lua, for the fast lock's string keys; only lengthens).
-- KEYS[1] the first lock key (it routes the call); ARGV[1..n] the lock keys, then
-- ARGV[n+2i-1] owner i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per lock 1 (renewed), 0 (not ours any more) or 2 (not served by
-- this node; the caller renews it by slot)}.
local n = (#ARGV - 1) / 3
local renewed = {ARGV[#ARGV]}
for i = 1, n do
    local name = ARGV[i]
    local kind = redis.pcall('type', name)
    if kind['err'] then
        renewed[i + 1] = 2
    elseif kind['ok'] == 'string' and redis.call('get', name) == ARGV[n + 2 * i - 1] then
        if redis.call('pttl', name) < tonumber(ARGV[n + 2 * i]) then
            redis.call('pexpire', name, ARGV[n + 2 * i])
        end
        renewed[i + 1] = 1
    else
        renewed[i + 1] = 0
    end
end
return renewed
