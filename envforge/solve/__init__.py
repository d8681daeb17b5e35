"""Stacks for a GPU arch from the compatibility table: the solver (``solver``), its
values (``solution``), its explained choices (``solve_picks``) and ``auto``'s choice
of a recipe for this host (``choose``)."""
