-- renew_each(across_slots, renew_one, typed_key): the loop of every renewal script, answering
-- {request id, then per lock 1 (renewed), 0 (not ours any more) or 2 (not served by this node;
-- across slots only: the caller renews it by slot)}.
-- In one slot: KEYS[i] lock i, ARGV[2i-1] owner field i, ARGV[2i] lease i in ms. Across slots
-- (allow-cross-slot-keys): KEYS[1] the first lock (it routes the call), ARGV[1..n] the locks,
-- then ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms. The last ARGV the request id.
-- The names are arguments there, not declared keys, because a cluster refuses a script whose
-- declared keys span slots even with allow-cross-slot-keys; undeclared keys of any slot this
-- node serves are allowed. A key of a slot it does not serve fails that one command: pcall
-- catches it (before anything was written for that lock) and the others go on.
-- renew_one(name, owner, lease_ms, key_type) renews one lock and answers 1 or 0; key_type is
-- the TYPE of typed_key(name) (of the lock's own key without typed_key). TYPE is asked first
-- because a command of the wrong type would raise WRONGTYPE and fail the whole call, leaving
-- every other lease of the call unrenewed.
local function renew_each(across_slots, renew_one, typed_key)
    local n, names, first = #KEYS, KEYS, 0
    if across_slots then
        n = (#ARGV - 1) / 3
        names, first = ARGV, n
    end
    local renewed = {ARGV[#ARGV]}
    for i = 1, n do
        local name = names[i]
        local key = typed_key and typed_key(name) or name
        local kind
        if across_slots then
            kind = redis.pcall('type', key)
        else
            kind = redis.call('type', key)
        end
        if kind['err'] then
            renewed[i + 1] = 2
        else
            local lease_ms = tonumber(ARGV[first + 2 * i])
            renewed[i + 1] = renew_one(name, ARGV[first + 2 * i - 1], lease_ms, kind['ok'])
        end
    end
    return renewed
end
