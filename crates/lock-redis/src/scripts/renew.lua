#!lua flags=allow-oom
-- Renew many leases at once. Allowed under OOM: PEXPIRE allocates nothing.
-- KEYS[i] lock hash i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id
-- Returns {request id, then one 1 (renewed) or 0 (not ours any more) per key}.
-- A key that is not a hash (the name lapsed and was re-taken by the fast lock, or written by
-- someone else) is not ours: it answers 0 and is left alone (see renew_hold).
--#include renew_each
--#include renew_hold
return renew_each(false, renew_hold)
