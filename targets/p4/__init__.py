"""The P4_16 syntax tree, its printer and the architecture-independent lowering."""
