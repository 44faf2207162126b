"""Typed IR, passes, partitioner, verifier and reference interpreter."""
