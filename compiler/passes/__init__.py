"""Passes over the typed IR, one per module; ``compiler.pipeline.PASSES`` orders them."""
