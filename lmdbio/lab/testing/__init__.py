"""Test helpers that start real services (a local 2-node Slurm); used by the tests and `make cluster-up`."""
