-- The hostile suite's whole schema: one small table, a sequence, three seeded rows.
CREATE TABLE items (
    id int PRIMARY KEY,
    v text NOT NULL,
    d date NOT NULL DEFAULT DATE '2024-03-04'
);
INSERT INTO items (id, v) VALUES (1, 'alpha'), (2, 'beta'), (3, 'gamma');
CREATE SEQUENCE ticket_seq;
