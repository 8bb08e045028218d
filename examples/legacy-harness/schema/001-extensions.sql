-- The team's own schema, applied in name order (docker-entrypoint-initdb.d style).
CREATE EXTENSION IF NOT EXISTS pgcrypto;
CREATE TYPE deal_stage AS ENUM ('lead', 'qualified', 'proposal', 'won', 'lost');
