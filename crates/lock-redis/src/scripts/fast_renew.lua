#!lua flags=allow-oom
-- Renew many fast-lock leases at once (only lengthens, as renew.lua).
-- KEYS[i] lock key i; ARGV[2i-1] owner field i, ARGV[2i] lease i in ms; the last ARGV the
-- request id
-- Returns {request id, then one 1 (renewed) or 0 (not ours any more) per key}.
-- A key that is not a string (the name lapsed and was re-taken by the reentrant lock, or
-- written by someone else) is not ours: it answers 0 and is left alone (see renew_fast_hold).
--#include renew_each
--#include renew_fast_hold
return renew_each(false, renew_fast_hold)
