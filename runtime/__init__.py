"""Control plane: the runtime API and the emulated data plane."""
