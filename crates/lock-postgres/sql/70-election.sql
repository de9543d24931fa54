-- Leader election (`PostgresBackend` as an `ElectionBackend`): the leader of an election is the
-- holder of the lock of its name (`distlock.locks`, so terms are that name's fencing tokens),
-- and its value is recorded beside the lock by the grant that made it leader. Every change of
-- leader is announced on the name's channel with the payload `all`, which wakes every observer
-- and candidate of every listening client (observers and candidates share the channel).

-- The value of each election's leader. A row belongs to the lock row of its key while that
-- row's owner is the one recorded here: it goes with the lock row (a release, an abandon, a
-- force-release or a sweep deletes the lock row, which cascades here), lives and is renewed
-- with its lease (it has none of its own), and after a lapsed lock is taken over by another
-- owner it is stale, ignored by `distlock.leader` and replaced by the next campaign's grant.
CREATE TABLE IF NOT EXISTS distlock.leaders (
    key   bytea PRIMARY KEY REFERENCES distlock.locks (key) ON DELETE CASCADE,
    owner text  NOT NULL,  -- the owner field that campaigned with `value`
    value bytea NOT NULL   -- the value as given (UTF-8; `text` refuses NUL)
);

-- One campaign attempt: `distlock.acquire`, and on a first hold (a new leader) the leader's
-- value recorded and the change announced to everyone. Outcomes as `acquire`'s.
CREATE OR REPLACE FUNCTION distlock.campaign(
    p_key bytea, p_name bytea, p_owner text, p_lease_ms bigint, p_fencing boolean, p_value bytea,
    OUT holds integer, OUT token bigint, OUT ttl_ms bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT a.holds, a.token, a.ttl_ms INTO holds, token, ttl_ms
      FROM distlock.acquire(p_key, p_name, p_owner, p_lease_ms, p_fencing) a;
    -- A re-entry (more holds) keeps the value its first hold recorded.
    IF holds = 1 THEN
        INSERT INTO distlock.leaders AS d (key, owner, value)
        VALUES (p_key, p_owner, p_value)
        ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, value = excluded.value;
        PERFORM pg_notify(distlock.channel(p_key), 'all');
    END IF;
END
$$;

-- A campaign side's release: `distlock.release`, and when it frees the lock (the leader's
-- value goes with its row) the end of the leadership announced to everyone. Returns as
-- `release`.
CREATE OR REPLACE FUNCTION distlock.campaign_release(p_key bytea, p_owner text, p_lease_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_left integer := distlock.release(p_key, p_owner, p_lease_ms);
BEGIN
    IF v_left = 0 THEN
        PERFORM pg_notify(distlock.channel(p_key), 'all');
    END IF;
    RETURN v_left;
END
$$;

-- A campaign side's abandon: `distlock.abandon`, and when it ends a live leadership (the
-- owner's last hold goes) that end announced to everyone.
CREATE OR REPLACE FUNCTION distlock.campaign_abandon(p_key bytea, p_owner text, p_keep integer)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_ends boolean;
BEGIN
    -- The row is locked first, as `abandon` locks it: the answer holds until it runs.
    SELECT l.expires_at > clock_timestamp() INTO v_ends
      FROM distlock.locks l
     WHERE l.key = p_key AND l.owner = p_owner AND l.holds > greatest(p_keep, 0)
       FOR UPDATE;
    PERFORM distlock.abandon(p_key, p_owner, p_keep);
    IF v_ends AND p_keep <= 0 THEN
        PERFORM pg_notify(distlock.channel(p_key), 'all');
    END IF;
END
$$;

-- A campaign side's force-release (deposing the leader): `distlock.force_release`, announced
-- to everyone when someone led. Returns as `force_release`.
CREATE OR REPLACE FUNCTION distlock.campaign_force_release(p_key bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_held boolean := distlock.force_release(p_key);
BEGIN
    IF v_held THEN
        PERFORM pg_notify(distlock.channel(p_key), 'all');
    END IF;
    RETURN v_held;
END
$$;

-- The current leader of `key` in one snapshot: its owner field, its value and its remaining
-- lease in milliseconds; NULLs when nobody leads (the lock is free, lapsed, or held by an
-- owner that did not campaign: a plain lock of the same name).
CREATE OR REPLACE FUNCTION distlock.leader(p_key bytea,
    OUT owner text, OUT value bytea, OUT ttl_ms bigint)
LANGUAGE sql STABLE AS $$
    SELECT l.owner, d.value,
           greatest(0, ceil(extract(epoch FROM (l.expires_at - clock_timestamp())) * 1000))::bigint
      FROM distlock.locks l
      JOIN distlock.leaders d ON d.key = l.key AND d.owner = l.owner
     WHERE l.key = p_key AND l.expires_at > clock_timestamp()
$$;
