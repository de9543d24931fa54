#!lua flags=allow-oom
-- Renew many leases at once. Allowed under OOM: PEXPIRE allocates nothing.
-- KEYS[i] lock hash i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id
-- Returns {request id, then one 1 (renewed) or 0 (not ours any more) per key}.
-- A key that is not a hash (the name lapsed and was re-taken by the fast lock, or written by
-- someone else) is not ours: it answers 0 and is left alone. Checked with TYPE first, because
-- HEXISTS on it would raise WRONGTYPE and fail the whole call, leaving every other lease of
-- the call unrenewed.
local renewed = {ARGV[2 * #KEYS + 1]}
for i = 1, #KEYS do
    if redis.call('type', KEYS[i])['ok'] == 'hash'
        and redis.call('hexists', KEYS[i], ARGV[2 * i - 1]) == 1 then
        -- Only lengthen: another hold of the same owner may have asked for a longer lease.
        if redis.call('pttl', KEYS[i]) < tonumber(ARGV[2 * i]) then
            redis.call('pexpire', KEYS[i], ARGV[2 * i])
        end
        renewed[i + 1] = 1
    else
        renewed[i + 1] = 0
    end
end
return renewed
