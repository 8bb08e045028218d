CREATE TABLE notes (
    id serial PRIMARY KEY,
    ticket text NOT NULL,
    turn integer NOT NULL,
    text text NOT NULL,
    weight integer NOT NULL
);
