#!lua flags=allow-oom
-- Release the fast lock if `owner` holds it (compare and delete), and wake the waiters when
-- someone waits: a waiter marked the lock, or the releasing client has waiters of its own.
-- Used when the server has no native compare-and-delete (Valkey 9 `DELIFEQ`, Redis 8.4 `DELEX`).
-- KEYS[1] lock key, KEYS[2] its waiting mark; ARGV[1] owner field, ARGV[2] release channel,
-- ARGV[3] release message, ARGV[4] how to announce the release ('p' PUBLISH, 's' SPUBLISH (a
-- cluster's sharded channels), 'b' both), ARGV[5] '1' to announce whether marked or not (the
-- releasing client has waiters for the lock), ARGV[6] request id
-- Returns the bare request id when deleted (the usual case; a bulk string costs the server less
-- than a table: `LockScript::bare`), {request id, 0} when the owner did not hold it.
-- The mark is deleted with the lock in one DEL, whose count says whether it was there: a
-- release nobody waits for costs no announcement and no extra call to find that out (see
-- `fast::mark_waiting`).
--#include announce
if redis.call('get', KEYS[1]) == ARGV[1] then
    if redis.call('del', KEYS[1], KEYS[2]) == 2 or ARGV[5] == '1' then
        announce(ARGV[4], ARGV[2], ARGV[3])
    end
    return ARGV[6]
end
return {ARGV[6], 0}
