-- lengthen(key, lease_ms): sets the lease of `key` to `lease_ms` (a number) unless it already
-- runs at least that long; answers whether it did. Only lengthen: another hold of the same
-- owner (or another owner's, on a shared key) may have asked for a longer lease and counts on it.
local function lengthen(key, lease_ms)
    if redis.call('pttl', key) < lease_ms then
        redis.call('pexpire', key, lease_ms)
        return true
    end
    return false
end
