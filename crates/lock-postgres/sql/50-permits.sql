-- Lease-bound permits (`PermitBackend`): Redisson's `RPermitExpirableSemaphore`. The count is
-- the semaphore's (`distlock.semaphores`); each permit out is a row with its holder and the end
-- of its lease on the server's clock. A permit whose lease has ended is given back to the count
-- by the next acquire of its name (or a forced release); until then it is counted as expired.
--
-- Locking order, so that no two steps deadlock: the permit rows first, in (key, owner, k)
-- order, then the semaphore's row (steps on one name only), then the fencing counter.

-- One row per permit out. An owner field holding several permits has one row each (numbered
-- `k` from 1), each with its own lease: a release gives back the one whose lease ends first.
CREATE TABLE IF NOT EXISTS distlock.permits_out (
    key        bytea       NOT NULL,  -- sha256(name), as in distlock.semaphores
    owner      text        NOT NULL,  -- `<client id>:<holder id>`
    k          integer     NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, owner, k)
);

-- Adds `given_back` permits to the count of `key` (creating it from 0, as a release to a
-- deleted semaphore does) and announces the new count; returns it.
CREATE OR REPLACE FUNCTION distlock.permit_give_back(p_key bytea, p_name bytea, p_given_back bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_count bigint;
BEGIN
    INSERT INTO distlock.semaphores AS s (key, name, permits)
    VALUES (p_key, p_name, p_given_back)
    ON CONFLICT (key) DO UPDATE SET permits = s.permits + p_given_back
    RETURNING s.permits INTO v_count;
    PERFORM distlock.semaphore_announce(p_key, v_count);
    RETURN v_count;
END
$$;

-- One acquire attempt. First every permit of `key` whose lease has ended goes back to the count
-- (announced). Then, when at least one permit is available, one is taken for `owner` with the
-- lease: `holds` is the owner's live permits after it, `token` the fencing token when asked
-- for. Otherwise `holds` is 0 and `ttl_ms` the time until the nearest permit's lease ends
-- (NULL: no permit is out; a missing semaphore is waited for all the same).
CREATE OR REPLACE FUNCTION distlock.permit_acquire(
    p_key bytea, p_name bytea, p_owner text, p_lease_ms bigint, p_fencing boolean,
    OUT holds integer, OUT token bigint, OUT ttl_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_reclaimed bigint;
BEGIN
    WITH gone AS (
        DELETE FROM distlock.permits_out
         WHERE (key, owner, k) IN (SELECT p.key, p.owner, p.k FROM distlock.permits_out p
                                    WHERE p.key = p_key AND p.expires_at <= v_now
                                    ORDER BY p.owner, p.k
                                      FOR UPDATE)
        RETURNING 1
    )
    SELECT count(*) INTO v_reclaimed FROM gone;
    IF v_reclaimed > 0 THEN
        PERFORM distlock.permit_give_back(p_key, p_name, v_reclaimed);
    END IF;

    UPDATE distlock.semaphores SET permits = permits - 1
     WHERE key = p_key AND permits >= 1;
    IF NOT FOUND THEN
        holds := 0;
        SELECT greatest(0, ceil(extract(epoch FROM (min(p.expires_at) - clock_timestamp())) * 1000))::bigint
          INTO ttl_ms
          FROM distlock.permits_out p
         WHERE p.key = p_key AND p.expires_at > v_now;
        RETURN;
    END IF;
    -- The semaphore's row is locked until commit: grants on this name take turns, and this
    -- statement sees every permit granted before.
    INSERT INTO distlock.permits_out (key, owner, k, expires_at)
    SELECT p_key, p_owner, coalesce(max(p.k), 0) + 1, v_now + p_lease_ms * interval '1 millisecond'
      FROM distlock.permits_out p
     WHERE p.key = p_key AND p.owner = p_owner;
    SELECT count(*)::integer INTO holds
      FROM distlock.permits_out p
     WHERE p.key = p_key AND p.owner = p_owner AND p.expires_at > v_now;
    IF p_fencing THEN
        token := distlock.next_token(p_key);
    END IF;
END
$$;

-- Gives back live permits of `owner` on `key`, those whose leases end first (never one a
-- longer-leased guard counts on), and announces the new count: for a release (`p_keep` NULL)
-- one, the permits kept then ending at least `lease` from now; otherwise those above `keep`,
-- no lease touched. Returns how many live permits the owner held before (0: none, nothing
-- changed). Expired permits are left to the next acquire, which gives them back.
CREATE OR REPLACE FUNCTION distlock.permit_give_back_above(
    p_key bytea, p_name bytea, p_owner text, p_keep integer, p_lease_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz;
    v_live integer[];
    v_held integer;
    v_keep integer;
BEGIN
    PERFORM FROM distlock.permits_out p
      WHERE p.key = p_key AND p.owner = p_owner
      ORDER BY p.owner, p.k
        FOR UPDATE;
    v_now := clock_timestamp();
    SELECT array_agg(p.k ORDER BY p.expires_at, p.k) INTO v_live
      FROM distlock.permits_out p
     WHERE p.key = p_key AND p.owner = p_owner AND p.expires_at > v_now;
    v_held := coalesce(cardinality(v_live), 0);
    v_keep := coalesce(p_keep, v_held - 1);
    IF v_held = 0 OR v_held <= v_keep THEN
        RETURN v_held;
    END IF;
    DELETE FROM distlock.permits_out
     WHERE key = p_key AND owner = p_owner AND k = ANY (v_live[1 : v_held - v_keep]);
    IF p_keep IS NULL AND v_keep > 0 THEN
        UPDATE distlock.permits_out
           SET expires_at = greatest(expires_at, v_now + p_lease_ms * interval '1 millisecond')
         WHERE key = p_key AND owner = p_owner AND k = ANY (v_live[v_held - v_keep + 1 :]);
    END IF;
    PERFORM distlock.permit_give_back(p_key, p_name, v_held - v_keep);
    RETURN v_held;
END
$$;

-- Gives back one permit of `owner` (the one whose lease ends first; the rest then end at least
-- `lease` from now). Returns the owner's permits left (0: it holds none now), -1 when it held
-- none (nothing changed).
CREATE OR REPLACE FUNCTION distlock.permit_release(
    p_key bytea, p_name bytea, p_owner text, p_lease_ms bigint)
RETURNS integer
LANGUAGE sql AS $$
    SELECT distlock.permit_give_back_above(p_key, p_name, p_owner, NULL, p_lease_ms) - 1
$$;

-- Gives back the live permits of `owner` above `keep` (the cleanup after a call of unknown
-- outcome); announces the new count when any went. Never lengthens a lease.
CREATE OR REPLACE FUNCTION distlock.permit_abandon(
    p_key bytea, p_name bytea, p_owner text, p_keep integer)
RETURNS void
LANGUAGE sql AS $$
    SELECT FROM distlock.permit_give_back_above(p_key, p_name, p_owner, greatest(p_keep, 0), NULL)
$$;

-- Gives back every permit of `key`, whoever holds it and whether or not its lease has ended (an
-- operator's repair); announces the new count and returns true when any was out.
CREATE OR REPLACE FUNCTION distlock.permit_force_release(p_key bytea, p_name bytea)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_out bigint;
BEGIN
    WITH gone AS (
        DELETE FROM distlock.permits_out
         WHERE (key, owner, k) IN (SELECT p.key, p.owner, p.k FROM distlock.permits_out p
                                    WHERE p.key = p_key
                                    ORDER BY p.owner, p.k
                                      FOR UPDATE)
        RETURNING 1
    )
    SELECT count(*) INTO v_out FROM gone;
    IF v_out = 0 THEN
        RETURN false;
    END IF;
    PERFORM distlock.permit_give_back(p_key, p_name, v_out);
    RETURN true;
END
$$;

-- Renews many owners' permits in one statement: for each entry, whether its owner still held a
-- live permit of its key (every such permit then ends at least `lease` from now). Entries for
-- the same key and owner are folded, the longest lease kept; rows are locked in (key, owner, k)
-- order, so two batches cannot deadlock.
CREATE OR REPLACE FUNCTION distlock.permit_renew(p_keys bytea[], p_owners text[], p_leases_ms bigint[])
RETURNS boolean[]
LANGUAGE sql AS $$
    WITH entries AS (
        SELECT e.key, e.owner, e.lease_ms, e.i
          FROM unnest(p_keys, p_owners, p_leases_ms) WITH ORDINALITY AS e(key, owner, lease_ms, i)
    ), folded AS (
        SELECT key, owner, max(lease_ms) AS lease_ms FROM entries GROUP BY key, owner
    ), locked AS (
        SELECT p.key, p.owner, p.k, f.lease_ms
          FROM distlock.permits_out p JOIN folded f ON p.key = f.key AND p.owner = f.owner
         WHERE p.expires_at > clock_timestamp()
         ORDER BY p.key, p.owner, p.k
           FOR UPDATE OF p
    ), renewed AS (
        UPDATE distlock.permits_out p
           SET expires_at = greatest(p.expires_at, clock_timestamp() + l.lease_ms * interval '1 millisecond')
          FROM locked l
         WHERE p.key = l.key AND p.owner = l.owner AND p.k = l.k
           AND p.expires_at > clock_timestamp()
        RETURNING p.key, p.owner
    )
    SELECT coalesce(array_agg(EXISTS (
               SELECT 1 FROM renewed r WHERE r.key = e.key AND r.owner = e.owner) ORDER BY e.i),
           '{}')
      FROM entries e
$$;

-- The semaphore `key` in one snapshot (read only: expired permits are counted, not given
-- back): the count (NULL: no semaphore), the owners holding live permits with how many each
-- (unsorted), the expired permits, and the longest remaining lease in milliseconds (NULL: no
-- live permit).
CREATE OR REPLACE FUNCTION distlock.permit_state(p_key bytea,
    OUT available bigint, OUT owners text[], OUT counts integer[], OUT expired integer,
    OUT longest_ms bigint)
LANGUAGE sql STABLE AS $$
    WITH clock AS (
        SELECT clock_timestamp() AS now
    ), live AS (
        SELECT p.owner, count(*)::integer AS held, max(p.expires_at) AS until
          FROM distlock.permits_out p, clock
         WHERE p.key = p_key AND p.expires_at > clock.now
         GROUP BY p.owner
    )
    SELECT (SELECT s.permits FROM distlock.semaphores s WHERE s.key = p_key),
           coalesce((SELECT array_agg(owner ORDER BY owner) FROM live), '{}'),
           coalesce((SELECT array_agg(held ORDER BY owner) FROM live), '{}'),
           (SELECT count(*)::integer FROM distlock.permits_out p, clock
             WHERE p.key = p_key AND p.expires_at <= clock.now),
           (SELECT greatest(0, ceil(extract(epoch FROM max(live.until - clock.now)) * 1000))::bigint
              FROM live, clock)
$$;
