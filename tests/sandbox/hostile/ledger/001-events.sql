-- A database every slot of a worker shares (shared_databases): an append-only event log.
CREATE TABLE events (
    record_id text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
