-- The semaphore (`SemaphoreBackend`): Redisson's `RSemaphore`, one counter of available permits
-- per name, taken and given back by anyone. Nothing expires: a permit taken stays taken until
-- someone gives it back.

-- One row per semaphore that was set (or given permits back). No row: the semaphore was never
-- set, or was deleted. The count may be negative (after `semaphore_add` with a negative delta).
CREATE TABLE IF NOT EXISTS distlock.semaphores (
    key     bytea  PRIMARY KEY,  -- sha256(name)
    name    bytea  NOT NULL,     -- the name as given (UTF-8), for listings
    permits bigint NOT NULL      -- the permits available
);

-- Announces that `key` has `count` permits available: wakes up to that many waiters in every
-- client that listens on the name's channel (nothing for a count of zero or below). The payload
-- is the count: a listener wakes up to that many of its waiters (an empty payload, a lock's
-- release, wakes one).
CREATE OR REPLACE FUNCTION distlock.semaphore_announce(p_key bytea, p_count bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_count > 0 THEN
        PERFORM pg_notify(distlock.channel(p_key), p_count::text);
    END IF;
END
$$;

-- Takes `permits` (at least 1) when the semaphore exists and has that many available. Taken:
-- `taken` true and `available` the count left. Not taken (nothing changed): `taken` false and
-- `available` the count (NULL: no semaphore).
CREATE OR REPLACE FUNCTION distlock.semaphore_take(p_key bytea, p_permits bigint,
    OUT taken boolean, OUT available bigint)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE distlock.semaphores
       SET permits = permits - p_permits
     WHERE key = p_key AND permits >= p_permits
    RETURNING permits INTO available;
    taken := FOUND;
    IF NOT taken THEN
        SELECT s.permits INTO available FROM distlock.semaphores s WHERE s.key = p_key;
    END IF;
END
$$;

-- Adds `delta` (negative: removes) to the count of `key`, from 0 when there is none (a release
-- gives permits back this way too), announces the new count and returns it. An overflow is an
-- error (`bigint out of range`) and changes nothing.
CREATE OR REPLACE FUNCTION distlock.semaphore_add(p_key bytea, p_name bytea, p_delta bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_count bigint;
BEGIN
    INSERT INTO distlock.semaphores AS s (key, name, permits)
    VALUES (p_key, p_name, p_delta)
    ON CONFLICT (key) DO UPDATE SET permits = s.permits + p_delta
    RETURNING s.permits INTO v_count;
    PERFORM distlock.semaphore_announce(p_key, v_count);
    RETURN v_count;
END
$$;

-- Sets the count of `key` to `permits` unless the semaphore exists; announces and returns true
-- when it set it.
CREATE OR REPLACE FUNCTION distlock.semaphore_set(p_key bytea, p_name bytea, p_permits bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO distlock.semaphores (key, name, permits)
    VALUES (p_key, p_name, p_permits)
    ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM distlock.semaphore_announce(p_key, p_permits);
    RETURN true;
END
$$;

-- Takes every available permit: sets an existing count to 0 and returns what it was (0 when
-- there is no semaphore, which it does not create). Announces nothing.
CREATE OR REPLACE FUNCTION distlock.semaphore_drain(p_key bytea) RETURNS bigint
LANGUAGE sql AS $$
    WITH before AS (
        SELECT key, permits FROM distlock.semaphores WHERE key = p_key FOR UPDATE
    ), drained AS (
        UPDATE distlock.semaphores s SET permits = 0
          FROM before b
         WHERE s.key = b.key
        RETURNING b.permits
    )
    SELECT coalesce((SELECT permits FROM drained), 0)
$$;

-- Sets the count of `key` to `permits` whatever it was (an operator's reset), announces it,
-- and returns the count before (NULL: there was no semaphore).
CREATE OR REPLACE FUNCTION distlock.semaphore_reset(p_key bytea, p_name bytea, p_permits bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_before bigint;
BEGIN
    LOOP
        -- The row locked first, so the count returned is the one replaced.
        UPDATE distlock.semaphores s SET permits = p_permits
          FROM (SELECT key, permits FROM distlock.semaphores WHERE key = p_key FOR UPDATE) b
         WHERE s.key = b.key
        RETURNING b.permits INTO v_before;
        EXIT WHEN FOUND;
        INSERT INTO distlock.semaphores (key, name, permits)
        VALUES (p_key, p_name, p_permits)
        ON CONFLICT (key) DO NOTHING;
        -- Not inserted: another client created it meanwhile; replace that one.
        EXIT WHEN FOUND;
    END LOOP;
    PERFORM distlock.semaphore_announce(p_key, p_permits);
    RETURN v_before;
END
$$;

-- Deletes the semaphore `key`; whether it existed. Announces nothing: waiters keep waiting
-- until it is set again. Lease-bound permits out (`distlock.permits_out`) are left as they are.
CREATE OR REPLACE FUNCTION distlock.semaphore_delete(p_key bytea) RETURNS boolean
LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM distlock.semaphores WHERE key = p_key RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;

-- The count of `key` (NULL: no semaphore).
CREATE OR REPLACE FUNCTION distlock.semaphore_state(p_key bytea) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT permits FROM distlock.semaphores WHERE key = p_key
$$;
