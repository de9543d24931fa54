-- The reentrant lock (`PostgresBackend` as a `LockBackend`).

-- One row per held lock. A row whose `expires_at` has passed is a free lock (its holder's
-- lease ran out); acquires take it over, the reads ignore it and `distlock.sweep` deletes it.
CREATE TABLE IF NOT EXISTS distlock.locks (
    key        bytea       PRIMARY KEY,  -- sha256(name)
    name       bytea       NOT NULL,     -- the name as given (UTF-8), for status and list
    owner      text        NOT NULL,     -- `<client id>:<holder id>`
    holds      integer     NOT NULL CHECK (holds > 0),
    expires_at timestamptz NOT NULL
);

-- The fencing counter of each name that ever gave a token. Never deleted, never expires.
CREATE TABLE IF NOT EXISTS distlock.fencing (
    key   bytea  PRIMARY KEY,
    token bigint NOT NULL
);

-- The channel a release of `key` is announced on: 63 bytes (PostgreSQL's longest identifier),
-- the same for every schema (a name's release in another schema wakes waiters spuriously,
-- which only makes them look again).
CREATE OR REPLACE FUNCTION distlock.channel(p_key bytea) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT 'distlock_' || substr(encode(p_key, 'hex'), 1, 54)
$$;

-- The next fencing token of `key`: one more than the last, and never below the server's clock
-- in microseconds, so tokens keep growing across a counter lost with the database.
CREATE OR REPLACE FUNCTION distlock.next_token(p_key bytea) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO distlock.fencing AS f (key, token)
    VALUES (p_key, greatest(1, floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint))
    ON CONFLICT (key) DO UPDATE
        SET token = greatest(f.token + 1, floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
    RETURNING token
$$;

-- One acquire attempt. Granted: `holds` is the owner's count after it, `token` the fencing
-- token when one was asked for. Not granted: `holds` is 0 and `ttl_ms` the holder's remaining
-- lease in milliseconds (0 when the lock was freed meanwhile: look again at once).
CREATE OR REPLACE FUNCTION distlock.acquire(
    p_key bytea, p_name bytea, p_owner text, p_lease_ms bigint, p_fencing boolean,
    OUT holds integer, OUT token bigint, OUT ttl_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_expires timestamptz := v_now + p_lease_ms * interval '1 millisecond';
BEGIN
    -- A free lock (no row, or an expired one) is taken; the owner's own live hold is
    -- re-entered, its expiry only lengthened. Another owner's live hold changes nothing.
    INSERT INTO distlock.locks AS l (key, name, owner, holds, expires_at)
    VALUES (p_key, p_name, p_owner, 1, v_expires)
    ON CONFLICT (key) DO UPDATE
        SET holds = CASE WHEN l.owner = p_owner AND l.expires_at > v_now THEN l.holds + 1 ELSE 1 END,
            expires_at = CASE WHEN l.owner = p_owner AND l.expires_at > v_now
                              THEN greatest(l.expires_at, v_expires) ELSE v_expires END,
            owner = p_owner,
            name = p_name
        WHERE l.owner = p_owner OR l.expires_at <= v_now
    RETURNING l.holds INTO holds;
    IF FOUND THEN
        IF p_fencing THEN
            token := distlock.next_token(p_key);
        END IF;
        RETURN;
    END IF;
    holds := 0;
    SELECT greatest(0, ceil(extract(epoch FROM (l.expires_at - clock_timestamp())) * 1000))::bigint
      INTO ttl_ms
      FROM distlock.locks l
     WHERE l.key = p_key;
    ttl_ms := coalesce(ttl_ms, 0);
END
$$;

-- Gives back one hold of `owner`. Returns the owner's remaining count (the expiry then at least
-- `now + lease`), 0 when the lock is now free (announced), -1 when the owner held nothing.
CREATE OR REPLACE FUNCTION distlock.release(p_key bytea, p_owner text, p_lease_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_row distlock.locks%ROWTYPE;
    v_now timestamptz;
BEGIN
    SELECT * INTO v_row FROM distlock.locks WHERE key = p_key FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND OR v_row.owner <> p_owner OR v_row.expires_at <= v_now THEN
        RETURN -1;
    END IF;
    IF v_row.holds > 1 THEN
        UPDATE distlock.locks
           SET holds = holds - 1,
               expires_at = greatest(expires_at, v_now + p_lease_ms * interval '1 millisecond')
         WHERE key = p_key;
        RETURN v_row.holds - 1;
    END IF;
    DELETE FROM distlock.locks WHERE key = p_key;
    PERFORM pg_notify(distlock.channel(p_key), '');
    RETURN 0;
END
$$;

-- Lowers `owner`'s count to at most `keep`; at zero the hold goes, and a lock nobody holds any
-- more is deleted and announced. Never raises a count or touches the expiry.
CREATE OR REPLACE FUNCTION distlock.abandon(p_key bytea, p_owner text, p_keep integer)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_row distlock.locks%ROWTYPE;
BEGIN
    SELECT * INTO v_row FROM distlock.locks WHERE key = p_key FOR UPDATE;
    IF NOT FOUND OR v_row.owner <> p_owner OR v_row.holds <= p_keep THEN
        RETURN;
    END IF;
    IF p_keep > 0 THEN
        UPDATE distlock.locks SET holds = p_keep WHERE key = p_key;
        RETURN;
    END IF;
    DELETE FROM distlock.locks WHERE key = p_key;
    IF v_row.expires_at > clock_timestamp() THEN
        PERFORM pg_notify(distlock.channel(p_key), '');
    END IF;
END
$$;

-- Deletes the lock whoever holds it; announces and returns true when it was held.
CREATE OR REPLACE FUNCTION distlock.force_release(p_key bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_expires timestamptz;
BEGIN
    DELETE FROM distlock.locks WHERE key = p_key RETURNING expires_at INTO v_expires;
    IF NOT FOUND OR v_expires <= clock_timestamp() THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(distlock.channel(p_key), '');
    RETURN true;
END
$$;

-- Renews many leases in one statement: for each entry, whether its owner still held the lock
-- (its expiry then at least `now + lease`). Entries for the same key and owner are folded,
-- the longest lease kept; rows are locked in key order, so two batches cannot deadlock.
CREATE OR REPLACE FUNCTION distlock.renew(p_keys bytea[], p_owners text[], p_leases_ms bigint[])
RETURNS boolean[]
LANGUAGE sql AS $$
    WITH entries AS (
        SELECT e.key, e.owner, e.lease_ms, e.i
          FROM unnest(p_keys, p_owners, p_leases_ms) WITH ORDINALITY AS e(key, owner, lease_ms, i)
    ), folded AS (
        SELECT key, owner, max(lease_ms) AS lease_ms FROM entries GROUP BY key, owner
    ), locked AS (
        SELECT l.key, l.owner, f.lease_ms
          FROM distlock.locks l JOIN folded f ON l.key = f.key AND l.owner = f.owner
         WHERE l.expires_at > clock_timestamp()
         ORDER BY l.key
           FOR UPDATE OF l
    ), renewed AS (
        UPDATE distlock.locks l
           SET expires_at = greatest(l.expires_at, clock_timestamp() + k.lease_ms * interval '1 millisecond')
          FROM locked k
         WHERE l.key = k.key AND l.owner = k.owner AND l.expires_at > clock_timestamp()
        RETURNING l.key, l.owner
    )
    SELECT coalesce(array_agg(EXISTS (
               SELECT 1 FROM renewed r WHERE r.key = e.key AND r.owner = e.owner) ORDER BY e.i),
           '{}')
      FROM entries e
$$;

-- The live holder of `key`, if any: owner, count, remaining lease in milliseconds.
CREATE OR REPLACE FUNCTION distlock.inspect(p_key bytea,
    OUT owner text, OUT holds integer, OUT ttl_ms bigint)
LANGUAGE sql STABLE AS $$
    SELECT l.owner, l.holds,
           greatest(0, ceil(extract(epoch FROM (l.expires_at - clock_timestamp())) * 1000))::bigint
      FROM distlock.locks l
     WHERE l.key = p_key AND l.expires_at > clock_timestamp()
$$;

-- Deletes up to `p_limit` locks whose lease ran out more than `p_grace_ms` ago (a holder that
-- crashed leaves its row; nobody else would delete it). Returns how many went.
CREATE OR REPLACE FUNCTION distlock.sweep(p_grace_ms bigint, p_limit integer) RETURNS integer
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM distlock.locks
         WHERE key IN (SELECT key FROM distlock.locks
                        WHERE expires_at < clock_timestamp() - p_grace_ms * interval '1 millisecond'
                        LIMIT p_limit
                          FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;
