-- The ops desk the agent works on: a sales pipeline and a support queue. Built once into the sandbox
-- image; each record starts from this state (harness.reset: recreate).
CREATE TABLE opportunities (
    id          serial PRIMARY KEY,
    account     text NOT NULL,
    name        text NOT NULL UNIQUE,
    stage       text NOT NULL CHECK (stage IN ('prospecting', 'qualification', 'proposal', 'negotiation',
                                               'closed_won', 'closed_lost')),
    amount      numeric(12, 2) NOT NULL,
    close_date  date NOT NULL,
    probability integer NOT NULL CHECK (probability BETWEEN 0 AND 100)
);

CREATE TABLE cases (
    id         serial PRIMARY KEY,
    account    text NOT NULL,
    subject    text NOT NULL,
    priority   text NOT NULL CHECK (priority IN ('low', 'medium', 'high', 'urgent')),
    status     text NOT NULL CHECK (status IN ('new', 'open', 'pending', 'resolved', 'closed')),
    resolution text
);

INSERT INTO opportunities (account, name, stage, amount, close_date, probability) VALUES
    ('Cedar Logistics',  'Cedar Data Migration',        'proposal',      48000, '2027-02-15', 50),
    ('Bluepeak Learning', 'Bluepeak Support Upgrade',   'qualification', 12500, '2027-01-31', 25),
    ('Vertex Retail',    'Vertex Analytics Rollout',    'negotiation',   91000, '2027-03-01', 75),
    ('Lumen Health',     'Lumen Seat Increase',         'prospecting',    8000, '2027-04-30', 10),
    ('Pioneer Foods',    'Pioneer Integration Project', 'proposal',      67000, '2027-02-28', 50),
    ('Bluepeak Learning', 'Bluepeak Multi-year Deal',   'prospecting',  150000, '2027-06-30', 10);

INSERT INTO cases (account, subject, priority, status) VALUES
    ('Cedar Logistics',  'dashboard not loading',           'high',   'open'),
    ('Vertex Retail',    'login failures after SSO change', 'urgent', 'open'),
    ('Lumen Health',     'export to CSV times out',         'medium', 'new'),
    ('Pioneer Foods',    'email sync stopped',              'low',    'pending');
