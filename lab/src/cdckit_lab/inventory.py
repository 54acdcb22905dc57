"""A small inventory database (customers, products, orders) for the demo and the tests."""

from __future__ import annotations

import psycopg2

SCHEMA_SQL = """
DROP SCHEMA IF EXISTS inventory CASCADE;
CREATE SCHEMA inventory;
CREATE TABLE inventory.customers (
    id          integer PRIMARY KEY,
    first_name  varchar(255) NOT NULL,
    last_name   varchar(255) NOT NULL,
    email       varchar(255) NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE inventory.products (
    id          integer PRIMARY KEY,
    name        varchar(255) NOT NULL,
    description text,
    weight      double precision,
    price       numeric(10, 2) NOT NULL,
    in_stock    boolean NOT NULL DEFAULT true
);
CREATE TABLE inventory.orders (
    order_number integer PRIMARY KEY,
    order_date   date NOT NULL,
    purchaser    integer NOT NULL REFERENCES inventory.customers (id) ON UPDATE CASCADE,
    quantity     integer NOT NULL,
    product_id   integer NOT NULL REFERENCES inventory.products (id)
);
INSERT INTO inventory.customers (id, first_name, last_name, email) VALUES
    (1001, 'Sally', 'Thomas', 'sally.thomas@acme.com'),
    (1002, 'George', 'Bailey', 'gbailey@foobar.com'),
    (1003, 'Edward', 'Walker', 'ed@walker.com'),
    (1004, 'Anne', 'Kretchmar', 'annek@noanswer.org');
INSERT INTO inventory.products (id, name, description, weight, price) VALUES
    (101, 'scooter', 'Small 2-wheel scooter', 3.14, 49.90),
    (102, 'car battery', '12V car battery', 8.1, 89.00),
    (103, '12-pack drill bits', '12-pack of drill bits with sizes ranging from #40 to #3', 0.8, 12.50),
    (104, 'hammer', '12oz carpenter''s hammer', 0.75, 9.99),
    (105, 'hammer', '14oz carpenter''s hammer', 0.875, 11.99),
    (106, 'hammer', '16oz carpenter''s hammer', 1.0, 13.49),
    (107, 'rocks', 'box of assorted rocks', 5.3, 4.20),
    (108, 'jacket', 'water resistent black wind breaker', 0.1, 39.00),
    (109, 'spare tire', '24 inch spare tire', 22.2, 65.00);
INSERT INTO inventory.orders VALUES
    (10001, '2016-01-16', 1001, 1, 102),
    (10002, '2016-01-17', 1002, 2, 105),
    (10003, '2016-02-19', 1002, 2, 106),
    (10004, '2016-02-21', 1003, 1, 107);
"""

# Inserts, updates (one of them a primary-key update) and deletes, in separate transactions.
CHANGES_SQL = (
    "INSERT INTO inventory.customers (id, first_name, last_name, email) VALUES "
    "(1005, 'Kenneth', 'Anderson', 'kander@acme.com')",
    "INSERT INTO inventory.orders VALUES (10005, '2016-03-01', 1005, 3, 101)",
    "UPDATE inventory.customers SET email = 'sally.t@acme.com' WHERE id = 1001",
    "UPDATE inventory.products SET price = 54.90, in_stock = false WHERE id = 101",
    "UPDATE inventory.customers SET id = 1010 WHERE id = 1003",  # primary-key update, cascades to orders
    "DELETE FROM inventory.orders WHERE order_number = 10002",
    "DELETE FROM inventory.products WHERE id = 109",
)


def create_inventory(dsn: str) -> None:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(SCHEMA_SQL)
        conn.commit()
    finally:
        conn.close()


def execute(dsn: str, *statements: str) -> None:
    """Run each statement in a transaction of its own."""
    conn = psycopg2.connect(dsn)
    try:
        for statement in statements:
            with conn.cursor() as cur:
                cur.execute(statement)
            conn.commit()
    finally:
        conn.close()


def apply_changes(dsn: str) -> int:
    """Apply the demo's changes, one transaction each; returns how many statements ran."""
    execute(dsn, *CHANGES_SQL)
    return len(CHANGES_SQL)
