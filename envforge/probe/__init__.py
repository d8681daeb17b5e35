"""The timed, isolated hardware probe: worker (stdlib only), runner, reports, select_device.

``worker.py`` runs inside the environment under test; everything else runs on the host.
This ``__init__`` imports nothing, so importing one probe module (the target contract,
which the audit uses) loads no sibling.
"""
