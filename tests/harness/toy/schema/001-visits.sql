CREATE TABLE visits (id serial PRIMARY KEY, record_id text NOT NULL, run text NOT NULL);
