#!lua flags=allow-oom
-- Give back one hold. Allowed under OOM: releasing frees memory.
-- KEYS[1] lock hash
-- ARGV[1] lease in ms (extends, never shortens, the remaining holds' lease), ARGV[2] owner field,
-- ARGV[3] release channel, ARGV[4] release message, ARGV[5] how to announce the release
-- ('p' PUBLISH, 's' SPUBLISH (a cluster's sharded channels), 'b' both), ARGV[6] request id
-- Returns {request id, result}: result -1 when the owner holds nothing (nothing changed), or the
-- remaining hold count; when the lock was freed (and the release published), the usual case,
-- the bare request id (a bulk string costs the server less than a table: `LockScript::bare`).
-- The last hold (the usual case) is HGET, DEL, PUBLISH: no count is written for a key that is
-- deleted next. The announcement: fragments/announce.lua.
--#include announce
--#include lengthen
local held = redis.call('hget', KEYS[1], ARGV[2])
if not held then
    return {ARGV[6], -1}
end
if tonumber(held) > 1 then
    local count = redis.call('hincrby', KEYS[1], ARGV[2], -1)
    -- Never shorten the lease of the remaining holds.
    lengthen(KEYS[1], tonumber(ARGV[1]))
    return {ARGV[6], count}
end
redis.call('del', KEYS[1])
announce(ARGV[5], ARGV[3], ARGV[4])
return ARGV[6]
