-- distlock's PostgreSQL schema, version 1. This directory holds it in one file per primitive,
-- run in the order of their names (this one first, `99-version.sql` last).
--
-- `PostgresBackend::install_schema` runs the files (in one transaction, under an advisory lock
-- so that concurrent installers take turns); operators who install schemas themselves run them
-- with psql, in one transaction:
--
--     cat sql/*.sql | psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -1 -f -
--
-- (`distlock-cli postgres schema` prints the same text.)
--
-- It installs into the schema named `distlock`; to install elsewhere, replace every
-- `distlock.` prefix (the backend's `schema` setting must then name it). Every statement is
-- idempotent: running the file again changes nothing, and a newer version of it upgrades an
-- older one in place.
--
-- Every decision about time is made on the server's clock (`clock_timestamp()`): clients' clocks
-- never meet. Lock names are compared by their SHA-256 digest (`key`), computed by the client:
-- a 4 KiB name does not fit a btree index row, and `text` refuses NUL.

CREATE SCHEMA IF NOT EXISTS distlock;

-- The version of this file. A database that has a newer one keeps it: an older client must not
-- replace newer functions with its own.
CREATE TABLE IF NOT EXISTS distlock.schema_version (
    version integer NOT NULL
);
DO $$
BEGIN
    IF (SELECT max(version) FROM distlock.schema_version) > 1 THEN
        RAISE EXCEPTION 'the distlock schema in this database is newer (version %) than this file (version 1)',
            (SELECT max(version) FROM distlock.schema_version)
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
