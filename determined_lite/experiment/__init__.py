"""Experiments: run a validated config's trials through the searcher, the launcher and the store."""
