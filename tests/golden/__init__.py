"""Golden run records: real runs as the run store holds them, committed as JSON
(``tests/fixtures/golden``), loaded into fresh stores by the tests to check that the
certificate and the report computed from them have not moved."""
