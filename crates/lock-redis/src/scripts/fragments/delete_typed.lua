--#include announce
-- delete_typed(key, expected, what, request_id, how, channel, message): deletes `key` when its
-- TYPE is `expected`, announces `message` on `channel` (announce(how, ...); nothing without a
-- channel) and answers {request_id, 1}; {request_id, 0} when there is no such key. A key of
-- another type is not `what` and is left alone: the answer is a WRONGTYPE error, as every other
-- call of its kind answers.
local function delete_typed(key, expected, what, request_id, how, channel, message)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' then
        return {request_id, 0}
    end
    if kind ~= expected then
        return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a ' .. what)
    end
    redis.call('del', key)
    if channel then
        announce(how, channel, message)
    end
    return {request_id, 1}
end
