"""``envforge audit``: check any Python environment's shared objects and packages.

Collect inside, judge outside: :mod:`.inventory` (stdlib only) runs with the target
interpreter and lists its distributions and shared objects; :mod:`.elfscan` (pyelftools,
with :mod:`.fatbin` for the GPU code containers) reads each shared object's ELF facts;
the ``judge_*`` modules compare them with the target arch and envforge's tables. The
inside modules (:mod:`.inventory`, :mod:`.fatbin`, :mod:`.elfscan`, :mod:`.inside`)
import nothing from envforge and run on Python 3.9, inside an image too (see
:mod:`.bundle`). docs/audit.md describes the checks and the JSON shape.

This ``__init__`` imports nothing, so the inside modules can run as a package of their own.
"""
