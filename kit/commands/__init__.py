"""Command groups of the `kit` CLI, one module per group."""
