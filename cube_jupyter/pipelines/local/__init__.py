"""Pipeline runs on this machine: the parallel executor and its worker processes."""
