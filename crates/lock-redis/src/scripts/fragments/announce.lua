-- announce(how, channel, message): tells the waiters on `channel`, by PUBLISH ('p'), SPUBLISH
-- (a cluster's sharded channels: 's') or both ('b'), as the client chose for this deployment.
-- pcall: a refused announcement (an ACL without PUBLISH) must not turn a change that happened
-- into an error; the waiters then wake on their timers.
local function announce(how, channel, message)
    if how ~= 's' then
        redis.pcall('publish', channel, message)
    end
    if how ~= 'p' then
        redis.pcall('spublish', channel, message)
    end
end
