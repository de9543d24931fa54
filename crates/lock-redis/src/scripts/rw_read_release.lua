#!lua flags=allow-oom
-- Give back read holds of a read-write lock: one (a release), or down to a count (the cleanup
-- after a call of unknown outcome). Allowed under OOM: releasing frees memory.
-- KEYS[1] lock hash, KEYS[2] writers waiting (writer-preferring ones)
-- ARGV[1] owner field, ARGV[2] holds to keep ('' for a release: one less), ARGV[3] the lock's
-- channel, ARGV[4] how to announce ('p' PUBLISH, 's' SPUBLISH, 'b' both), ARGV[5] request id
-- Returns {request id, -1} when the owner holds no read hold (nothing changed), else
-- {request id, the owner's read holds left}. As Redisson's read unlock: each hold given back
-- deletes a timeout key (the one ending first, where Redisson deletes the last numbered); once the owner has none left and other fields remain, the lock
-- lives on as long as the longest read hold still alive, and goes (announced with 0, waking
-- one waiter) when none is, unless its writer still holds it.
--#include announce
--#include lengthen
--#include read_timeout_prefix
--#include longest_read_hold

local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    return {ARGV[5], -1}
end
local held = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if held == nil then
    return {ARGV[5], -1}
end
local keep = held - 1
if ARGV[2] ~= '' then
    keep = tonumber(ARGV[2])
    if held <= keep then
        return {ARGV[5], held}
    end
end
-- Give back the holds whose leases end first (an expired one first of all), never one a live
-- guard with a longer lease counts on; the last number takes a freed one, so the keys stay
-- numbered 1..count as Redisson expects.
local prefix = read_timeout_prefix(KEYS[1], ARGV[1])
for n = held, keep + 1, -1 do
    local first, shortest = n, nil
    for k = 1, n do
        local left = redis.call('pttl', prefix .. ':' .. k)
        if shortest == nil or left < shortest then
            first, shortest = k, left
        end
    end
    redis.call('del', prefix .. ':' .. first)
    if first ~= n and redis.call('exists', prefix .. ':' .. n) == 1 then
        redis.call('rename', prefix .. ':' .. n, prefix .. ':' .. first)
    end
end
if keep > 0 then
    redis.call('hset', KEYS[1], ARGV[1], keep)
else
    redis.call('hdel', KEYS[1], ARGV[1])
end
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = longest_read_hold(KEYS[1])
    -- In write mode the lock lives as long as the write hold: read holds (the writer's own, a
    -- downgrade) may lengthen it, never shorten it.
    if mode == 'write' then
        lengthen(KEYS[1], longest)
        return {ARGV[5], keep}
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        return {ARGV[5], keep}
    end
end
redis.call('del', KEYS[1])
-- With writers waiting, wake every waiter (1) so the writers are among them; else one (0).
local message = '0'
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call('zcount', KEYS[2], now, '+inf') > 0 then
    message = '1'
end
announce(ARGV[4], ARGV[3], message)
return {ARGV[5], keep}
