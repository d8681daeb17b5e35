"""Projects: a user's pyproject.toml or requirements.txt on top of a certified stack."""
