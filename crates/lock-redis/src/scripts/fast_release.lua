#!lua flags=allow-oom
-- Release the fast lock if `owner` holds it (compare and delete), and wake the waiters if any
-- marked it as waited for. Used when the server has no native compare-and-delete (Valkey 9
-- `DELIFEQ`, Redis 8.4 `DELEX`).
-- KEYS[1] lock key, KEYS[2] its waiting mark; ARGV[1] owner field, ARGV[2] release channel,
-- ARGV[3] release message, ARGV[4] how to announce the release ('p' PUBLISH, 's' SPUBLISH (a
-- cluster's sharded channels), 'b' both), ARGV[5] request id
-- Returns the bare request id when deleted (the usual case; a bulk string costs the server less
-- than a table: `LockScript::bare`), {request id, 0} when the owner did not hold it.
-- The mark is deleted with the lock in one DEL, whose count says whether it was there: a
-- release nobody waits for costs no announcement (one PUBLISH from a script costs the server
-- about what the GET and DEL together do), and no extra call to find that out. A waiter that
-- is woken and loses sets the mark again with its next attempt (see `fast::try_acquire`).
--#include announce
if redis.call('get', KEYS[1]) == ARGV[1] then
    if redis.call('del', KEYS[1], KEYS[2]) == 2 then
        announce(ARGV[4], ARGV[2], ARGV[3])
    end
    return ARGV[5]
end
return {ARGV[5], 0}
