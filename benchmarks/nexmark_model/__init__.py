"""Nexmark for statekeep's benchmarks and tests: ``benchmarks.nexmark_model.generator`` makes the reference suite's
Person, Auction and Bid streams deterministically from a seed (its docstring has the model, the record shapes and
the file layout). Nothing is imported here, so ``python -m benchmarks.nexmark_model.generator`` runs the module once."""
