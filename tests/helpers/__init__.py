"""Shared test helpers: recipes (:mod:`.recipes`), the fake engine (:mod:`.fake_engine`) and
a Dockerfile parser for render tests (:mod:`.dockerfile_syntax`)."""
