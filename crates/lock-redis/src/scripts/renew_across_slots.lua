#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many leases at once on one cluster node, whatever their slots (renew.lua can only take
-- keys of one slot there). Allowed under OOM: PEXPIRE allocates nothing.
-- KEYS[1] the first lock hash (it routes the call); ARGV[1..n] the lock hashes, then
-- ARGV[n+2i-1] owner field i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per lock 1 (renewed), 0 (not ours any more) or 2 (not served by
-- this node: its slot lives elsewhere or is on the move; the caller renews it by slot)}.
-- See renew_each for why the names are arguments, not declared keys.
--#include renew_each
--#include renew_hold
return renew_each(true, renew_hold)
