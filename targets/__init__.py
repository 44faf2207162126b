"""Code generators, one per target, found through a registry."""
