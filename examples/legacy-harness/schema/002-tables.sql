CREATE TABLE accounts (
    id serial PRIMARY KEY,
    name text NOT NULL,
    city text NOT NULL,
    -- pgcrypto at work: every account gets an opaque public token
    token text NOT NULL DEFAULT encode(gen_random_bytes(8), 'hex')
);
CREATE TABLE contacts (
    id serial PRIMARY KEY,
    account_id integer NOT NULL REFERENCES accounts (id),
    name text NOT NULL,
    email text NOT NULL UNIQUE
);
CREATE TABLE deals (
    id serial PRIMARY KEY,
    account_id integer NOT NULL REFERENCES accounts (id),
    title text NOT NULL,
    stage deal_stage NOT NULL DEFAULT 'lead',
    amount numeric(12, 2) NOT NULL DEFAULT 0
);
CREATE TABLE notes (
    id serial PRIMARY KEY,
    deal_id integer NOT NULL REFERENCES deals (id),
    body text NOT NULL
);
