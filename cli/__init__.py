"""The top floor: the `lakelog` command line, the HTTP client it speaks with, and the local
cluster launcher. Imports every layer below; nothing imports it."""
