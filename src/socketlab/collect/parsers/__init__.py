"""One parser per collector: ``parse(records, directory) -> CollectorOutput``. Pure functions of
the recorded files, tested on fixtures under tests/fixtures/collectors/."""
