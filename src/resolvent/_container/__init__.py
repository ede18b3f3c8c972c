"""The container: providers, plans per function, the APP scope and its lifespan,
sessions, calls, overrides and the start-up."""
