#!lua flags=allow-oom
-- Release the fast lock if `owner` holds it (compare and delete), and wake the waiters. Used
-- when the server has no native compare-and-delete (Valkey 9 `DELIFEQ`, Redis 8.4 `DELEX`).
-- KEYS[1] lock key; ARGV[1] owner field, ARGV[2] release channel, ARGV[3] release message,
-- ARGV[4] how to announce the release ('p' PUBLISH, 's' SPUBLISH (a cluster's sharded
-- channels), 'b' both), ARGV[5] request id
-- Returns the bare request id when deleted (the usual case; a bulk string costs the server less
-- than a table: `LockScript::bare`), {request id, 0} when the owner did not hold it.
--#include announce
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    announce(ARGV[4], ARGV[2], ARGV[3])
    return ARGV[5]
end
return {ARGV[5], 0}
