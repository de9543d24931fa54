-- read_timeout_prefix(name, field): the read-write lock `name` keeps one timeout key per read
-- hold of `field`, this prefix .. ':' .. k (k = 1..its hold count), carrying that hold's lease;
-- named as Redisson's suffixName names them: `{name}:<field>:rwlock_timeout`, or
-- `name:<field>:rwlock_timeout` when the name has its own hash tag.
local function read_timeout_prefix(name, field)
    if string.find(name, '{', 1, true) then
        return name .. ':' .. field .. ':rwlock_timeout'
    end
    return '{' .. name .. '}:' .. field .. ':rwlock_timeout'
end
