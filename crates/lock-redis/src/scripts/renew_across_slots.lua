#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many leases at once on one cluster node, whatever their slots (renew.lua can only take
-- keys of one slot there). Allowed under OOM: PEXPIRE allocates nothing.
-- KEYS[1] the first lock hash (it routes the call); ARGV[1..n] the lock hashes, then
-- ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per lock 1 (renewed), 0 (not ours any more) or 2 (not served by
-- this node: its slot lives elsewhere or is on the move; the caller renews it by slot)}.
-- The names are arguments, not declared keys, because a cluster refuses a script whose declared
-- keys span slots even with allow-cross-slot-keys; undeclared keys of any slot this node
-- serves are allowed. A key of a slot it does not serve fails that one command: redis.pcall
-- catches it (before anything was written for that lock) and the others go on.
local n = (#ARGV - 1) / 3
local renewed = {ARGV[#ARGV]}
for i = 1, n do
    local name = ARGV[i]
    local kind = redis.pcall('type', name)
    if kind['err'] then
        renewed[i + 1] = 2
    elseif kind['ok'] == 'hash' and redis.call('hexists', name, ARGV[n + 2 * i - 1]) == 1 then
        -- Only lengthen: another hold of the same owner may have asked for a longer lease.
        if redis.call('pttl', name) < tonumber(ARGV[n + 2 * i]) then
            redis.call('pexpire', name, ARGV[n + 2 * i])
        end
        renewed[i + 1] = 1
    else
        -- Not a hash (the fast lock's, or someone else's), or not held by this owner.
        renewed[i + 1] = 0
    end
end
return renewed
