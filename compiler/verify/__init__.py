"""Proofs about placed programs with Z3 (issue 6): so far the switch-cache admission rule."""
