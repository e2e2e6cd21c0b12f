"""The HTTP routes of the service, one module per area, thin over the services."""
