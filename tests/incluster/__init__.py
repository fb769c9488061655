"""The in-cluster checks are a package (incluster.test_...), so that their modules named as
another suite's (test_tas_migration, test_certificate_renewal, test_load_aware) are collected
beside them when pytest is given several suites at once."""
