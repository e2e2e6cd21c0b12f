"""accord api: the HTTP service and the `accord` command line."""
