-- permits_key(name): the sorted set of a semaphore's permits out, `{name}:timeout`
-- (`name:timeout` when the name has its own hash tag), derived as Redisson's suffixName does.
local function permits_key(name)
    if string.find(name, '{', 1, true) then
        return name .. ':timeout'
    end
    return '{' .. name .. '}:timeout'
end

-- renew_permits(now): renew_each's step for lease-bound permits, at the server's clock `now`
-- (ms): every permit of the owner (members `<owner>:<k>`) whose lease still runs is moved to
-- end `lease_ms` from now (ZADD GT: never earlier). Call renew_each with typed_key
-- permits_key. 0 when no permit of the owner is left.
local function renew_permits(now)
    return function(name, owner, lease_ms, key_type)
        local key = permits_key(name)
        local prefix = owner .. ':'
        local until_ms = now + lease_ms
        local any = 0
        if key_type == 'zset' then
            local members = redis.call('zrange', key, 0, -1, 'withscores')
            for j = 1, #members, 2 do
                if string.sub(members[j], 1, #prefix) == prefix and tonumber(members[j + 1]) > now then
                    redis.call('zadd', key, 'gt', until_ms, members[j])
                    any = 1
                end
            end
        end
        return any
    end
end
