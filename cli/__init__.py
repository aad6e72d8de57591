"""The top floor: the `lakelog` command line and the local cluster launcher. Imports every layer
below (the Python client, `lakelog.client`, among them); nothing imports it."""
