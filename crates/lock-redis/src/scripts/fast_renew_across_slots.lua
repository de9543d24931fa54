#!lua flags=allow-oom,allow-cross-slot-keys
-- Renew many fast-lock leases at once on one cluster node, whatever their slots (as
-- renew_across_slots.lua, for the fast lock's string keys; only lengthens).
-- KEYS[1] the first lock key (it routes the call); ARGV[1..n] the lock keys, then
-- ARGV[n+2i-1] owner i and ARGV[n+2i] lease i in ms; the last ARGV the request id.
-- Returns {request id, then per lock 1 (renewed), 0 (not ours any more) or 2 (not served by
-- this node; the caller renews it by slot)}.
--#include renew_each
--#include renew_fast_hold
return renew_each(true, renew_fast_hold)
