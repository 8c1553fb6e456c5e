"""The run plan: the config read once into typed values, signatures, preflight and the budget."""
