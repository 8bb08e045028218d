-- The helpdesk team's schema: an enum, pgcrypto's uuids, a trigger-free event log.
CREATE EXTENSION IF NOT EXISTS pgcrypto;
CREATE TYPE ticket_status AS ENUM ('new', 'open', 'pending', 'solved', 'closed');
CREATE TYPE ticket_priority AS ENUM ('low', 'normal', 'high', 'urgent');

CREATE TABLE customers (
    id serial PRIMARY KEY,
    name text NOT NULL,
    plan text NOT NULL DEFAULT 'basic'
);

CREATE TABLE tickets (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    ref text NOT NULL UNIQUE,
    customer_id int NOT NULL REFERENCES customers(id),
    subject text NOT NULL,
    status ticket_status NOT NULL DEFAULT 'new',
    priority ticket_priority NOT NULL DEFAULT 'normal',
    assignee text
);

CREATE TABLE ticket_events (
    id bigserial PRIMARY KEY,
    ticket_id uuid NOT NULL REFERENCES tickets(id) ON DELETE CASCADE,
    kind text NOT NULL,
    body text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
